package pipeline_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestKilledWorkerHandsOff: two workers share the partitions, a durable
// state store and the pipeline's checkpoint coordinator. One dies without
// a clean shutdown — its Kafka, Temporal and state-store connections are
// cut and its goroutines cancelled, so it leaves no group, commits nothing
// and writes no final checkpoint. The survivor, given the partitions by
// the group once the victim's session expires, restores them from the
// victim's last durable checkpoint and announces itself; the coordinator
// starts their handoffs, which complete on it, and its rounds checkpoint
// them on the survivor within the session timeout plus two intervals of
// the kill, with room for a loaded machine (issue 16 item 2: it took 95–105 s when the per-shard workflows
// kept scheduling on the dead worker's queue). The victim's lease workflow
// tells the coordinator the victim is gone. Every output then equals what
// one uninterrupted run over the same records computes: the replayed
// records recomputed the same values from exactly the restored state.
func TestKilledWorkerHandsOff(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	durable := memory.New()
	rec := newRecorder()

	// The victim reaches Kafka, Temporal and the durable store through
	// connections the test can cut.
	kcut, tcut := &faults.Net{}, &faults.Net{}
	vstore := &cutStore{StateStore: durable}
	vp := withKafkaOptions(temporalPipeline(addrs, vstore, rec.shared()),
		kgo.Dialer(kcut.Dial), kgo.RetryTimeout(2*time.Second), kgo.RequestTimeoutOverhead(time.Second))
	victim := start(t, vp, pipeline.WithWorkerID("victim"), pipeline.WithTemporal(dialThrough(t, srv, tcut)))
	// A failure before the heal below: the victim's stop (a cleanup
	// registered before this one, so run after it) needs its connections.
	t.Cleanup(func() { kcut.Heal(); tcut.Heal() })

	sp := temporalPipeline(addrs, durable, rec.shared())
	// When each shard was first checkpointed on the survivor after the
	// kill (the zero time until the kill).
	var mu sync.Mutex
	var killedAt time.Time
	firstAfterKill := map[streaming.ShardID]time.Time{}
	observe := pipeline.WithCheckpointObserver(func(shard streaming.ShardID, _ streaming.CheckpointStatus) {
		mu.Lock()
		defer mu.Unlock()
		if _, seen := firstAfterKill[shard]; !seen && !killedAt.IsZero() {
			firstAfterKill[shard] = time.Now()
		}
	})
	survivor := start(t, sp, pipeline.WithWorkerID("survivor"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker(), observe)

	require.Eventually(t, func() bool {
		v, s := len(victim.w.Shards()), len(survivor.w.Shards())
		return v > 0 && s > 0 && v+s == parts
	}, 30*time.Second, 20*time.Millisecond, "the two workers never shared the partitions")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	phase1 := makeReadings(16, 1, 40)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool { return rec.has(reference(t, sp, phase1)) }, 30*time.Second, 20*time.Millisecond)

	// Wait for a round's checkpoint of each victim shard at its current
	// offset, so the survivor has a checkpoint to restore.
	victimShards := heldShards(victim.w)
	require.NotEmpty(t, victimShards)
	for _, shard := range victimShards {
		require.Eventually(t, func() bool {
			row, err := queryShard(ctx, srv.Client, vp.Name, shard)
			var local string
			for _, s := range victim.w.Shards() {
				if s.Shard == shard {
					local = s.Checkpoint.LastCursor
				}
			}
			return err == nil && row.Status == workflows.ShardOK && row.Owner.WorkerID == "victim" &&
				row.Cursor != "" && local == row.Cursor
		}, time.Minute, 50*time.Millisecond, "no round checkpointed victim shard %s", shard)
	}

	// The victim applies more records past its checkpoint, then dies.
	phase2 := makeReadings(16, 41, 80)
	produce(t, addrs, phase2)
	upTo2 := append(slices.Clone(phase1), phase2...)
	require.Eventually(t, func() bool { return rec.has(reference(t, sp, upTo2)) }, 30*time.Second, 20*time.Millisecond)
	// The victim's lease heartbeat has reported what it holds (heartbeats
	// are throttled, so this can lag a rebalance).
	require.Eventually(t, func() bool {
		var shards []streaming.ShardID
		for _, h := range lastHeartbeat(ctx, t, srv.Client, workflows.LeaseWorkflowID("victim")) {
			shards = append(shards, h.Shard)
		}
		return subset(victimShards, shards)
	}, 30*time.Second, 100*time.Millisecond, "the victim's lease heartbeat never listed its shards")
	kcut.Cut()
	tcut.Cut()
	vstore.Cut()
	victim.cancel()
	// Its final checkpoints, if it took any, failed on the cut store:
	// Run says so.
	t.Cleanup(func() {
		kcut.Heal() // as the cleanup above: its stop needs its connections
		tcut.Heal()
		if err := victim.stopErr(t); err != nil {
			require.ErrorIs(t, err, errStoreCut)
		}
	})
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()

	// Each victim shard's first checkpoint on the survivor comes within
	// the session timeout and two intervals (5 s), give or take a loaded
	// machine: the bound allows 20 s more, far below the 95–105 s the
	// handoff took when rounds kept scheduling on the dead worker's queue
	// (one CI run with the machine saturated measured 5.1 s).
	bound := 3*time.Second + 2*sp.Checkpoint.Interval + 20*time.Second
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, shard := range victimShards {
			if _, ok := firstAfterKill[shard]; !ok {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond, "the survivor never checkpointed the victim's shards")
	mu.Lock()
	for _, shard := range victimShards {
		took := firstAfterKill[shard].Sub(killedAt)
		t.Logf("shard %s: first checkpoint on the survivor %s after the kill (bound %s)", shard, took.Round(time.Millisecond), bound)
		require.LessOrEqual(t, took, bound, "shard %s: first checkpoint on the new owner %s after the kill", shard, took)
	}
	mu.Unlock()

	// The lease workflow declares the victim dead and tells the coordinator.
	var ls workflows.LeaseState
	require.NoError(t, srv.Client.GetWorkflow(ctx, workflows.LeaseWorkflowID("victim"), "").Get(ctx, &ls))
	require.Equal(t, workflows.LeaseDead, ls.Status, "lease: %+v", ls)
	var orphaned []streaming.ShardID
	for _, h := range ls.Orphaned {
		orphaned = append(orphaned, h.Shard)
		require.Equal(t, "victim", h.WorkerID)
	}
	require.Subset(t, orphaned, victimShards)
	require.Equal(t, []string{workflows.CoordinatorWorkflowID(vp.Name)}, ls.Told)
	require.Empty(t, ls.Handoffs, "the coordinator starts the handoffs, not the lease")

	for _, shard := range victimShards {
		var hs workflows.HandoffState
		id := workflows.HandoffWorkflowIDAt(vp.Name, shard, epochOf(survivor.w, shard))
		waitHandoff(ctx, t, srv.Client, id, "survivor", &hs)
		require.Equal(t, workflows.StepDone, hs.Step)
		require.NotNil(t, hs.From, "handoff %s does not know the victim", id)
		require.Equal(t, "victim", hs.From.WorkerID)
		require.Greater(t, hs.To.Epoch, hs.From.Epoch)
		require.Nil(t, hs.FinalCheckpoint, "a dead worker cannot take a final checkpoint")
		require.NotEmpty(t, hs.FinalCheckpointSkipped)
		require.NotNil(t, hs.Restored)
		require.Positive(t, hs.Restored.CheckpointID, "handoff %s restored no checkpoint", id)
		require.Eventually(t, func() bool {
			row, err := queryShard(ctx, srv.Client, vp.Name, shard)
			return err == nil && row.Owner.WorkerID == "survivor" && row.Status == workflows.ShardOK
		}, time.Minute, 100*time.Millisecond)
	}
	require.ElementsMatch(t, allShards(parts), heldShards(survivor.w))
	restored := 0
	for _, s := range survivor.w.Shards() {
		if slices.Contains(victimShards, s.Shard) && s.Restored > 0 {
			restored++
		}
	}
	require.Equal(t, len(victimShards), restored, "the survivor did not restore the victim's shards from their checkpoints")

	// More records after the move; then every output must match one
	// uninterrupted run over everything.
	phase3 := makeReadings(16, 81, 120)
	produce(t, addrs, phase3)
	want := reference(t, sp, append(upTo2, phase3...))
	require.Eventually(t, func() bool { return rec.has(want) }, time.Minute, 20*time.Millisecond)
	rec.requireExact(t, want)
	rec.mu.Lock()
	replayed := rec.writes - len(rec.outs)
	rec.mu.Unlock()
	require.Positive(t, replayed, "no record was replayed after the kill: the test did not exercise a restore")

	// Let the victim's goroutines finish now that nothing can observe
	// them any more.
	kcut.Heal()
	tcut.Heal()
	select {
	case <-victim.w.Done():
	case <-time.After(90 * time.Second):
		t.Fatal("the killed worker's Run did not return")
	}
}
