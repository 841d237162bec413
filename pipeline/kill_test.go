package pipeline_test

import (
	"context"
	"slices"
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

// TestKilledWorkerHandsOff: two workers share the partitions and a
// durable state store. One dies without a clean shutdown — its Kafka,
// Temporal and state-store connections are cut and its goroutines
// cancelled, so it leaves no group, commits nothing and writes no final
// checkpoint. Its lease workflow sees the heartbeat time out and starts
// the handoff of the shards it held; the survivor, given the partitions
// by the group once the victim's session expires, restores them from the
// victim's last durable checkpoint and announces itself, and the handoffs
// complete on it. Every output then equals what one uninterrupted run
// over the same records computes: the replayed records recomputed the
// same values from exactly the restored state.
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
	vp := temporalPipeline(addrs, vstore, rec.shared())
	vp.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 3 * time.Second, RevokeTimeout: 5 * time.Second,
		ClientOptions: []kgo.Opt{kgo.Dialer(kcut.Dial), kgo.RetryTimeout(2 * time.Second), kgo.RequestTimeoutOverhead(time.Second)}}
	victim := start(t, vp, pipeline.WithWorkerID("victim"), pipeline.WithTemporal(dialThrough(t, srv, tcut)))

	sp := temporalPipeline(addrs, durable, rec.shared())
	survivor := start(t, sp, pipeline.WithWorkerID("survivor"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker())

	require.Eventually(t, func() bool {
		v, s := len(victim.w.Shards()), len(survivor.w.Shards())
		return v > 0 && s > 0 && v+s == parts
	}, 30*time.Second, 20*time.Millisecond, "the two workers never shared the partitions")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	phase1 := makeReadings(16, 1, 40)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool { return rec.has(reference(t, sp, phase1)) }, 30*time.Second, 20*time.Millisecond)

	// Wait for a workflow checkpoint of each victim shard at its current
	// offset, so the survivor has a checkpoint to restore.
	victimShards := heldShards(victim.w)
	require.NotEmpty(t, victimShards)
	for _, shard := range victimShards {
		require.Eventually(t, func() bool {
			st, err := queryCheckpoint(ctx, srv.Client, vp.Name, shard)
			var local string
			for _, s := range victim.w.Shards() {
				if s.Shard == shard {
					local = s.Checkpoint.LastCursor
				}
			}
			return err == nil && st.Completed > 0 && st.Owner != nil && st.Owner.WorkerID == "victim" &&
				st.LastCursor != "" && local == st.LastCursor
		}, time.Minute, 50*time.Millisecond, "no workflow checkpoint of victim shard %s", shard)
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
	killedAt := time.Now()

	// The lease workflow declares the victim dead and hands off its shards.
	var ls workflows.LeaseState
	require.NoError(t, srv.Client.GetWorkflow(ctx, workflows.LeaseWorkflowID("victim"), "").Get(ctx, &ls))
	require.Equal(t, workflows.LeaseDead, ls.Status, "lease: %+v", ls)
	var orphaned []streaming.ShardID
	for _, h := range ls.Orphaned {
		orphaned = append(orphaned, h.Shard)
		require.Equal(t, "victim", h.WorkerID)
	}
	require.Subset(t, orphaned, victimShards)
	t.Logf("lease workflow declared the victim dead %s after the kill; handoffs %v", time.Since(killedAt).Round(time.Millisecond), ls.Handoffs)

	for _, shard := range orphaned {
		var hs workflows.HandoffState
		id := workflows.HandoffWorkflowID(vp.Name, shard)
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
			st, err := queryCheckpoint(ctx, srv.Client, vp.Name, shard)
			return err == nil && st.Owner != nil && st.Owner.WorkerID == "survivor"
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
