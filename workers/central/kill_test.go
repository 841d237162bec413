package central

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestKilledWorkerHandsOff: two central workers share the partitions and
// a durable state store. One dies without a clean shutdown — its Kafka,
// Temporal and state-store connections are cut and its goroutines
// cancelled, so it leaves no group, commits nothing and writes no final
// checkpoint. Its lease workflow sees the heartbeat time out and starts
// the handoff of the shards it held; the survivor, given the partitions
// by the group once the victim's session expires, restores them from the
// victim's last durable checkpoint and announces itself, and the handoffs
// complete on it. Every derived signal then equals what one uninterrupted
// run over the same records computes: the replayed records recomputed
// the same values from exactly the restored state.
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
	vclient := dialThrough(t, srv, tcut)
	vcfg := baseConfig(t, "victim", addrs, srv.HostPort)
	victim := startWorker(t, vcfg, WithTemporalClient(vclient), WithDurableStore(vstore), WithSinks(rec.as("victim")),
		WithLogger(testLogger(t).With("w", "victim")),
		WithKafkaOptions(kafka.WithClientOptions(kgo.Dialer(kcut.Dial), kgo.RetryTimeout(2*time.Second), kgo.RequestTimeoutOverhead(time.Second))))

	scfg := baseConfig(t, "survivor", addrs, srv.HostPort)
	scfg.Temporal.ControlWorker = true
	survivor := startWorker(t, scfg, WithTemporalClient(srv.Client), WithDurableStore(durable), WithSinks(rec.as("survivor")),
		WithLogger(testLogger(t).With("w", "survivor")))
	defer survivor.stop(t)

	require.Eventually(t, func() bool {
		v, s := len(victim.w.Host().HeldShards()), len(survivor.w.Host().HeldShards())
		return v > 0 && s > 0 && v+s == parts
	}, 30*time.Second, 20*time.Millisecond, "the two workers never shared the partitions")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	phase1 := makeReadings(16, 1, 40)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool { return rec.has(reference(t, vcfg.Graph, phase1)) }, 30*time.Second, 20*time.Millisecond)

	// Wait for a workflow checkpoint of each victim shard at its current
	// offset, so the survivor has a checkpoint to restore.
	victimShards := victim.w.Host().HeldShards()
	require.NotEmpty(t, victimShards)
	for _, shard := range victimShards {
		p, err := parseShard(shard)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st, err := queryCheckpoint(ctx, srv.Client, vcfg.Pipeline, shard)
			cp, _, ok := victim.w.Source().Checkpointer(p)
			return err == nil && ok && st.Completed > 0 && st.Owner != nil && st.Owner.WorkerID == "victim" &&
				st.LastCursor != "" && cp.Status().LastCursor == st.LastCursor
		}, time.Minute, 50*time.Millisecond, "no workflow checkpoint of victim shard %s", shard)
	}

	// The victim applies more records past its checkpoint, then dies.
	phase2 := makeReadings(16, 41, 80)
	produce(t, addrs, phase2)
	upTo2 := append(slices.Clone(phase1), phase2...)
	require.Eventually(t, func() bool { return rec.has(reference(t, vcfg.Graph, upTo2)) }, 30*time.Second, 20*time.Millisecond)
	// The victim's lease heartbeat has reported what it holds (heartbeats
	// are throttled, so this can lag a rebalance).
	require.Eventually(t, func() bool {
		held := lastHeartbeat(ctx, t, srv.Client, workflows.LeaseWorkflowID("victim"))
		var shards []streaming.ShardID
		for _, h := range held {
			shards = append(shards, h.Shard)
		}
		return len(victimShards) > 0 && subset(victimShards, shards)
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
	// The orphans are the shards of the victim's last heartbeat that
	// reached the server: all it held at the kill, and possibly shards it
	// had already given up (heartbeats are throttled); the survivor
	// answers those handoffs too.
	var orphaned []streaming.ShardID
	for _, h := range ls.Orphaned {
		orphaned = append(orphaned, h.Shard)
		require.Equal(t, "victim", h.WorkerID)
	}
	require.Subset(t, orphaned, victimShards)
	t.Logf("lease workflow declared the victim dead %s after the kill; handoffs %v", time.Since(killedAt).Round(time.Millisecond), ls.Handoffs)

	for _, shard := range orphaned {
		var hs workflows.HandoffState
		id := workflows.HandoffWorkflowID(vcfg.Pipeline, shard)
		// The handoff running now is the one for this move (the lease
		// workflow's or the survivor's, whichever started it).
		waitHandoff(ctx, t, srv.Client, id, "survivor", &hs)
		require.Equal(t, workflows.StepDone, hs.Step)
		require.NotNil(t, hs.From, "handoff %s does not know the victim", id)
		require.Equal(t, "victim", hs.From.WorkerID)
		require.Greater(t, hs.To.Epoch, hs.From.Epoch)
		require.Nil(t, hs.FinalCheckpoint, "a dead worker cannot take a final checkpoint")
		require.NotEmpty(t, hs.FinalCheckpointSkipped)
		require.NotNil(t, hs.Restored)
		require.Positive(t, hs.Restored.CheckpointID, "handoff %s restored no checkpoint", id)
		t.Logf("handoff %s: from %s@%d to %s@%d, restored checkpoint %d at %s, skipped final: %s", shard,
			hs.From.WorkerID, hs.From.Epoch, hs.To.WorkerID, hs.To.Epoch, hs.Restored.CheckpointID, hs.Restored.Cursor, hs.FinalCheckpointSkipped)

		// The checkpoint workflow follows the new owner.
		require.Eventually(t, func() bool {
			st, err := queryCheckpoint(ctx, srv.Client, vcfg.Pipeline, shard)
			return err == nil && st.Owner != nil && st.Owner.WorkerID == "survivor"
		}, time.Minute, 100*time.Millisecond)
	}
	require.ElementsMatch(t, allShards(parts), survivor.w.Host().HeldShards())
	require.Positive(t, survivor.w.Source().Stats().RestoredDurable, "the survivor restored nothing from the victim's checkpoints")

	// More records after the move; then every output must match one
	// uninterrupted run over everything.
	phase3 := makeReadings(16, 81, 120)
	produce(t, addrs, phase3)
	all := append(upTo2, phase3...)
	want := reference(t, vcfg.Graph, all)
	require.Eventually(t, func() bool { return rec.has(want) }, time.Minute, 20*time.Millisecond)
	rec.requireExact(t, want)
	rec.mu.Lock()
	t.Logf("writes: %v (%d outputs; replayed %d)", rec.byWorker, len(rec.outs), rec.writes-len(rec.outs))
	replayed := rec.writes - len(rec.outs)
	rec.mu.Unlock()
	require.Positive(t, replayed, "no record was replayed after the kill: the test did not exercise a restore")

	// Let the victim's goroutines finish now that nothing can observe
	// them any more.
	kcut.Heal()
	tcut.Heal()
	select {
	case <-victim.done:
	case <-time.After(90 * time.Second):
		t.Fatal("the killed worker's Run did not return")
	}
}

func allShards(parts int) []streaming.ShardID {
	var out []streaming.ShardID
	for p := range parts {
		out = append(out, streaming.KafkaShard(topic, int32(p)))
	}
	return out
}

// waitHandoff waits for the latest run of handoff id to complete with the
// shard on worker, failing with the saga's state and pending activities.
func waitHandoff(ctx context.Context, t *testing.T, c client.Client, id, worker string, hs *workflows.HandoffState) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var err error
	for time.Now().Before(deadline) {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.GetWorkflow(gctx, id, "").Get(gctx, hs)
		cancel()
		if err == nil && hs.To != nil && hs.To.WorkerID == worker {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	var st workflows.HandoffState
	v, qerr := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if qerr == nil {
		qerr = v.Get(&st)
	}
	desc, derr := c.DescribeWorkflow(ctx, id, "")
	t.Fatalf("handoff %s never completed on %s: last get error %v, result %+v; status %+v (query error %v); pending activities %v (describe error %v)",
		id, worker, err, *hs, st, qerr, pendingActivities(desc), derr)
}

// lastHeartbeat returns the held shards in the last heartbeat of the
// lease workflow's pending activity.
func lastHeartbeat(ctx context.Context, t *testing.T, c client.Client, id string) []activities.HeldShard {
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil || d.RawResponse == nil {
		return nil
	}
	for _, pa := range d.RawResponse.GetPendingActivities() {
		if pa.GetActivityType().GetName() != "KeepLeases" || pa.GetHeartbeatDetails() == nil {
			continue
		}
		var held []activities.HeldShard
		if err := converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &held); err != nil {
			t.Logf("heartbeat details: %v", err)
			return nil
		}
		return held
	}
	return nil
}

func subset(sub, of []streaming.ShardID) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}
