package activities_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
)

type roundShard struct {
	src   *counterSource
	epoch *atomic.Uint64
	cp    *streaming.Checkpointer
}

// roundSetup registers shards "readings/<i>" of pipeline "iot" over one
// store, each owned at epoch 5.
func roundSetup(t *testing.T, store interface {
	streaming.StateStore
	streaming.CursorStore
}, names ...streaming.ShardID) (*activities.Shards, map[streaming.ShardID]roundShard) {
	t.Helper()
	shards := activities.NewShards()
	out := map[streaming.ShardID]roundShard{}
	for _, n := range names {
		src := &counterSource{}
		var e atomic.Uint64
		e.Store(5)
		cp, err := streaming.NewCheckpointer("iot/"+string(n), src, store, store, streaming.WithCursorFormatter(activities.FormatCursor),
			streaming.WithOwnership(streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return streaming.Epoch(e.Load()), true })))
		require.NoError(t, err)
		shards.Register("iot", n, cp)
		out[n] = roundShard{src, &e, cp}
	}
	return shards, out
}

func runRound(t *testing.T, host activities.CheckpointHost, in activities.RoundInput) activities.RoundResult {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&activities.Rounds{Host: host})
	var a *activities.Rounds
	v, err := env.ExecuteActivity(a.CheckpointRound, in)
	require.NoError(t, err)
	var res activities.RoundResult
	require.NoError(t, v.Get(&res))
	return res
}

func TestRoundCheckpointsEveryShardAndSaysWhyNot(t *testing.T) {
	store := memory.New()
	shards, rs := roundSetup(t, store, "readings/0", "readings/1", "readings/2")
	for n, s := range rs {
		for range 10 + len(n) {
			s.src.apply(3)
		}
	}
	rs["readings/2"].epoch.Store(6) // moved on: the coordinator's epoch 5 is stale
	res := runRound(t, shards, activities.RoundInput{
		Pipeline: "iot", Round: 7, WorkerID: "w1", Breaker: "half-open",
		Shards: []activities.ShardEpoch{{Shard: "readings/0", Epoch: 5}, {Shard: "readings/1", Epoch: 5}, {Shard: "readings/2", Epoch: 5}, {Shard: "readings/9", Epoch: 5}},
	})
	require.Len(t, res.Shards, 4)
	assert.Equal(t, uint64(7), res.Round)
	for i, want := range []string{activities.ShardOK, activities.ShardOK, activities.ShardNotOwner, activities.ShardNotOwner} {
		assert.Equal(t, want, res.Shards[i].Status, "shard %s: %s", res.Shards[i].Shard, res.Shards[i].Error)
	}
	ok := res.Shards[0]
	assert.Equal(t, uint64(1), ok.CheckpointID)
	assert.Equal(t, streaming.Epoch(5), ok.Epoch)
	assert.Equal(t, "readings/3@20", ok.Cursor)
	assert.Positive(t, ok.Bytes)
	assert.Equal(t, 2, res.Count(activities.ShardOK))
	assert.Equal(t, res.Shards[0].Bytes+res.Shards[1].Bytes, res.Bytes())
	assert.Contains(t, res.Shards[3].Error, `does not serve shard iot/readings/9`)
	assert.Contains(t, res.Shards[2].Error, "epoch 5")

	// The coordinator's breaker reaches every shard's status (the gauge).
	assert.Equal(t, streaming.BreakerHalfOpen, rs["readings/1"].cp.Status().Breaker)
	v := shards.Coordinator("iot")
	assert.Equal(t, uint64(7), v.Round)
	assert.Equal(t, "half-open", v.Breaker)

	// The state each shard committed restores.
	fresh := &counterSource{}
	cp, err := streaming.NewCheckpointer("iot/readings/1", fresh, store, store)
	require.NoError(t, err)
	_, err = cp.Restore(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(3*(10+len("readings/1"))), fresh.value)
}

func TestRoundReportsStorageFailuresPerShard(t *testing.T) {
	mem := memory.New()
	fs := faults.Wrap(mem, mem)
	shards, rs := roundSetup(t, fs, "a", "b")
	rs["a"].src.apply(1)
	rs["b"].src.apply(1)
	fs.FailNext(faults.OpSaveCursor, 1) // the first shard's cursor commit fails
	res := runRound(t, shards, activities.RoundInput{Pipeline: "iot", Round: 1, WorkerID: "w1",
		Shards: []activities.ShardEpoch{{Shard: "a", Epoch: 5}, {Shard: "b", Epoch: 5}}})
	assert.Equal(t, activities.ShardFailed, res.Shards[0].Status)
	assert.Contains(t, res.Shards[0].Error, "injected fault")
	assert.Equal(t, activities.ShardOK, res.Shards[1].Status)
}

// TestFinalRoundOfAReleasedShard: a handoff's final checkpoint of a shard
// the worker already released (its revoke callback checkpointed it)
// answers with that checkpoint; at another epoch it is not the owner.
func TestFinalRoundOfAReleasedShard(t *testing.T) {
	store := memory.New()
	shards, rs := roundSetup(t, store, "readings/4")
	rs["readings/4"].src.apply(9)
	_, err := rs["readings/4"].cp.Checkpoint(context.Background())
	require.NoError(t, err)
	shards.Unregister("iot", "readings/4")

	in := activities.RoundInput{Pipeline: "iot", WorkerID: "w1", Final: true, Shards: []activities.ShardEpoch{{Shard: "readings/4", Epoch: 5}}}
	res := runRound(t, shards, in)
	require.Equal(t, activities.ShardOK, res.Shards[0].Status)
	assert.Equal(t, uint64(1), res.Shards[0].CheckpointID)
	in.Shards[0].Epoch = 4
	assert.Equal(t, activities.ShardNotOwner, runRound(t, shards, in).Shards[0].Status)
	in.Final, in.Shards[0].Epoch = false, 5
	assert.Equal(t, activities.ShardNotOwner, runRound(t, shards, in).Shards[0].Status, "only a final round may answer for a released shard")
}

func TestRoundActivityRefusesBadInput(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&activities.Rounds{Host: activities.NewShards()})
	var a *activities.Rounds
	_, err := env.ExecuteActivity(a.CheckpointRound, activities.RoundInput{Pipeline: "iot", WorkerID: "w1"})
	require.Error(t, err)
	typ, nonRetryable := appErrType(t, err)
	assert.Equal(t, activities.ErrTypeBadInput, typ)
	assert.True(t, nonRetryable)
	assert.Contains(t, err.Error(), `worker "w1": no shards`)
}

// TestRunLocalCheckpointsWithoutRounds: with no round for the max age the
// worker checkpoints on its own, and the next round reports how many.
func TestRunLocalCheckpointsWithoutRounds(t *testing.T) {
	store := memory.New()
	shards, rs := roundSetup(t, store, "a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shards.RunLocal(ctx, "iot", 40*time.Millisecond) }()
	require.Eventually(t, func() bool { return shards.Coordinator("iot").LocalCheckpoints >= 4 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	rs["a"].src.apply(1)
	res := runRound(t, shards, activities.RoundInput{Pipeline: "iot", Round: 1, WorkerID: "w1",
		Shards: []activities.ShardEpoch{{Shard: "a", Epoch: 5}, {Shard: "b", Epoch: 5}}})
	for _, s := range res.Shards {
		require.Equal(t, activities.ShardOK, s.Status)
		assert.GreaterOrEqual(t, s.Local, 2, "shard %s", s.Shard)
		assert.Greater(t, s.CheckpointID, uint64(s.Local), "the round's checkpoint follows the local ones")
	}
	res = runRound(t, shards, activities.RoundInput{Pipeline: "iot", Round: 2, WorkerID: "w1",
		Shards: []activities.ShardEpoch{{Shard: "a", Epoch: 5}}})
	assert.Zero(t, res.Shards[0].Local, "reported once")
}

// TestRunLocalFollowsTheCoordinatorsShorterMaxAge: once a round tells a
// shorter max age than the worker's own, a local checkpoint is due after
// it, but RunLocal kept checking at a quarter of the worker's (an hour
// here: every 15 minutes), so the worker went that long without one.
func TestRunLocalFollowsTheCoordinatorsShorterMaxAge(t *testing.T) {
	store := memory.New()
	shards, _ := roundSetup(t, store, "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shards.RunLocal(ctx, "iot", time.Hour) }()
	runRound(t, shards, activities.RoundInput{Pipeline: "iot", Round: 1, WorkerID: "w1", MaxCheckpointAge: activities.Duration(40 * time.Millisecond),
		Shards: []activities.ShardEpoch{{Shard: "a", Epoch: 5}}})
	require.Eventually(t, func() bool { return shards.Coordinator("iot").LocalCheckpoints >= 2 }, 10*time.Second, 5*time.Millisecond,
		"local checkpoints every 40ms (the coordinator's max age) without rounds")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
