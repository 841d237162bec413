package pipeline_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// lazyClient is a Temporal client for srv that connects on first use, as
// the worker binary makes it: a worker holding it starts while the server
// is down.
func lazyClient(t testing.TB, srv *temporaltest.Server) client.Client {
	t.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: srv.HostPort, Logger: tlog.NewStructuredLogger(testLogger(t))})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestTemporalOutage (issue 13 §4): the Temporal dev server is stopped
// for more than five checkpoint intervals while a worker runs. Its shards
// keep checkpointing on their own (no round for max_checkpoint_age); the
// worker is then killed abruptly during the outage, and a second worker
// started during the outage (Temporal unreachable: a lazy client) takes
// its partitions over, restores them from the local checkpoints the first
// one took during the outage and runs its hot path. Every output equals
// one uninterrupted run's: the kill lost nothing. Once the server is back
// the second worker joins the coordinator's rounds, which checkpoint its
// shards and reconcile the local checkpoints.
func TestTemporalOutage(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 2
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	durable := memory.New()
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The heartbeat timeout outlasts the outage: this test is about
	// checkpoints, not about the lease declaring a live worker dead.
	tp := func(durable streaming.StateStore, kafka ...kgo.Opt) pipeline.Pipeline {
		p := withKafkaOptions(temporalPipeline(addrs, durable, rec.shared()), kafka...)
		p.Checkpoint.HeartbeatTimeout = time.Minute
		return p
	}
	kcut := &faults.Net{}
	vstore := &cutStore{StateStore: durable}
	vp := tp(vstore, kgo.Dialer(kcut.Dial), kgo.RetryTimeout(2*time.Second), kgo.RequestTimeoutOverhead(time.Second))
	first := start(t, vp, pipeline.WithWorkerID("first"), pipeline.WithTemporal(lazyClient(t, srv)), pipeline.WithControlWorker())
	require.Eventually(t, func() bool { return len(first.w.Shards()) == parts }, 30*time.Second, 20*time.Millisecond)

	phase1 := makeReadings(16, 1, 30)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool { return rec.has(reference(t, vp, phase1)) }, 30*time.Second, 20*time.Millisecond)
	rounds := map[streaming.ShardID]uint64{} // the checkpoint of each shard's last round before the outage
	for _, shard := range allShards(parts) {
		require.Eventually(t, func() bool {
			row, err := queryShard(ctx, srv.Client, vp.Name, shard)
			rounds[shard] = row.CheckpointID
			return err == nil && row.Status == workflows.ShardOK && row.Owner.WorkerID == "first"
		}, time.Minute, 50*time.Millisecond, "no round checkpointed shard %s", shard)
	}

	// Outage. The shards checkpoint locally: after max_checkpoint_age
	// without a round, and every max_checkpoint_age after that.
	srv.Stop()
	cutAt := time.Now()
	interval := vp.Checkpoint.Interval
	before := first.w.Stats().Checkpoints
	phase2 := makeReadings(16, 31, 60)
	produce(t, addrs, phase2)
	upTo2 := append(slices.Clone(phase1), phase2...)
	require.Eventually(t, func() bool { return rec.has(reference(t, vp, upTo2)) }, 30*time.Second, 20*time.Millisecond)
	applied := first.w.Stats().Checkpoints
	require.Eventually(t, func() bool { return first.w.Stats().Checkpoints >= applied+parts }, 30*time.Second, 20*time.Millisecond,
		"no local checkpoint of every shard while Temporal was down")
	require.Greater(t, first.w.Stats().Checkpoints, before)
	local := map[streaming.ShardID]streaming.CheckpointID{}
	for _, s := range first.w.Shards() {
		local[s.Shard] = s.Checkpoint.LastID
		require.Greater(t, uint64(s.Checkpoint.LastID), rounds[s.Shard], "shard %s: no checkpoint since the last round", s.Shard)
	}

	// More records past the local checkpoints, then an abrupt kill.
	phase3 := makeReadings(16, 61, 70)
	produce(t, addrs, phase3)
	upTo3 := append(slices.Clone(upTo2), phase3...)
	require.Eventually(t, func() bool { return rec.has(reference(t, vp, upTo3)) }, 30*time.Second, 20*time.Millisecond)
	kcut.Cut()
	vstore.Cut()
	first.cancel()
	// Its final checkpoints, if it took any, failed on the cut store:
	// Run says so.
	t.Cleanup(func() {
		if err := first.stopErr(t); err != nil {
			require.ErrorIs(t, err, errStoreCut)
		}
	})

	// A second worker starts while Temporal is still down and takes over
	// from the local checkpoints.
	second := start(t, tp(durable), pipeline.WithWorkerID("second"), pipeline.WithTemporal(lazyClient(t, srv)), pipeline.WithControlWorker())
	require.Eventually(t, func() bool { return len(second.w.Shards()) == parts }, time.Minute, 20*time.Millisecond,
		"the second worker never got the partitions while Temporal was down")
	for _, s := range second.w.Shards() {
		require.Equal(t, local[s.Shard], s.Restored, "shard %s: not restored from the local checkpoint taken during the outage", s.Shard)
	}
	phase4 := makeReadings(16, 71, 90)
	produce(t, addrs, phase4)
	all := append(slices.Clone(upTo3), phase4...)
	want := reference(t, vp, all)
	require.Eventually(t, func() bool { return rec.has(want) }, time.Minute, 20*time.Millisecond)
	rec.requireExact(t, want)
	rec.mu.Lock()
	replayed := rec.writes - len(rec.outs)
	rec.mu.Unlock()
	require.Positive(t, replayed, "no record was replayed after the kill: the test did not exercise a restore")
	// The second worker checkpoints locally too.
	require.Eventually(t, func() bool { return second.w.Stats().Checkpoints >= parts }, 30*time.Second, 20*time.Millisecond)

	// Back after at least five intervals: the second worker joins the
	// rounds and the coordinator accounts for the local checkpoints.
	if d := 5*interval - time.Since(cutAt); d > 0 {
		time.Sleep(d) // the outage's length is the scenario, not synchronisation
	}
	srv.Restart(t)
	t.Logf("Temporal was down for %s", time.Since(cutAt).Round(time.Millisecond))
	for _, shard := range allShards(parts) {
		var row workflows.ShardRow
		require.Eventually(t, func() bool {
			var err error
			row, err = queryShard(ctx, srv.Client, vp.Name, shard)
			return err == nil && row.Owner.WorkerID == "second" && row.Status == workflows.ShardOK && row.CheckpointID > uint64(local[shard])
		}, 2*time.Minute, 100*time.Millisecond, "shard %s: rounds did not resume on the second worker: %+v", shard, row)
	}
	require.Eventually(t, func() bool {
		st, err := queryCoordinator(ctx, srv.Client, vp.Name)
		return err == nil && st.LocalCheckpoints > 0
	}, time.Minute, 100*time.Millisecond, "the coordinator never heard of the local checkpoints")
	rec.requireExact(t, want)
}
