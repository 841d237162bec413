package pipeline

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
)

// TestRoundQueuedBehindTheFinalCheckpointTakesNoCheckpoint: a round that
// looked a partition up in the registry while the revoke's final
// checkpoint ran, and so waited for it, answers ShardNotOwner and commits
// nothing: the final checkpoint stays the partition's last here. Bug: the
// round took a checkpoint after the final one (of a shard being closed:
// its sinks released, its series deleted), or, once the shard was
// closed, failed on its closed state and reported a storage failure,
// which the coordinator's breaker counts.
func TestRoundQueuedBehindTheFinalCheckpointTakesNoCheckpoint(t *testing.T) {
	ctx := context.Background()
	var (
		w     *Worker
		k     *kafkaShard
		once  sync.Once
		round = make(chan activities.RoundResult, 1)
		errs  = make(chan error, 1)
	)
	p := smaPipeline(t, 1)
	var err error
	w, err = NewWorker(ctx, p, WithWorkerID("w1"), WithCheckpointObserver(func(streaming.ShardID, streaming.CheckpointStatus) {
		if !k.final { // the observer runs on the releasing goroutine, under the checkpoint's stage lock
			return
		}
		once.Do(func() {
			// A round arrives while the final checkpoint commits. Its
			// look-up in the registry reports the half-open breaker to the
			// registered checkpointers under the lock the release's
			// unregistering waits for: seen, the round has the shard.
			startRoundOn(ctx, t, w, "plant", k.shard, round, errs)
		})
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	k = gainPartition(ctx, t, w, 0)

	var recs []*kgo.Record
	for off := range int64(3) {
		recs = append(recs, &kgo.Record{Topic: "readings", Offset: off, Value: fmt.Appendf(nil, `{"sensor":"a","ts":%d,"value":1}`, off+1)})
	}
	require.NoError(t, k.apply(ctx, recs))
	require.NoError(t, k.Release(ctx, true))
	final, err := w.host.FinalCheckpoint(ctx, "plant", k.id, 1)
	require.NoError(t, err)

	requireRoundNotOwner(t, round, errs, "shard plant/readings/0 at epoch 1: is releasing it")
	require.Equal(t, streaming.CheckpointID(final.CheckpointID), k.cp.Status().LastID, "the shard's last checkpoint is the final one")
}

// TestCheckpointOfALostPartitionIsNotHeld: once a lost partition's
// release began, a checkpoint of its shard (a round's, or the local
// control's, that took it before) is refused as not held, which the
// coordinator does not count as a storage failure. Bug: it failed on the
// shard's closed state ("runtime closed"), a storage failure.
func TestCheckpointOfALostPartitionIsNotHeld(t *testing.T) {
	ctx := context.Background()
	w, k := openPartitionZero(ctx, t, smaPipeline(t, 1))
	w.host.gained(k.shard)
	require.NoError(t, k.Release(ctx, false))
	_, err := k.cp.Checkpoint(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorContains(t, err, "shard plant/readings/0 at epoch 1: is releasing it")
}

// TestMQTTRoundQueuedBehindTheFinalCheckpointTakesNoCheckpoint: at a
// worker's stop, a round that looked the MQTT shard up while its final
// checkpoint ran, and so waited for it, answers ShardNotOwner and commits
// nothing: the final checkpoint stays the shard's last. Bug: as a Kafka
// partition's (TestRoundQueuedBehindTheFinalCheckpointTakesNoCheckpoint),
// the round checkpointed the shard being closed after its final
// checkpoint, or failed on its closed state (a storage failure the
// coordinator's breaker counts).
func TestMQTTRoundQueuedBehindTheFinalCheckpointTakesNoCheckpoint(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	ack := false // no stall checkpoints: the final one is the only one at the stop
	p := Pipeline{
		Name: "edge",
		Source: MQTTSource{Servers: []string{b.URL()}, Topics: []string{"sensors/#"}, ClientID: "gw-1",
			DeadLetterTopic: "dlq/sensors", AckOnCheckpoint: &ack},
		Graph: Graph{Inputs: []Input{{Name: "value"}},
			Nodes: []Node{{Name: "mean", Type: "sma", Params: map[string]any{"window": 2}, Inputs: []string{"value"}}}},
		State:      State{Memory: 128 << 20, Durable: Durable{Store: memory.New()}},
		Checkpoint: Checkpoint{Interval: time.Hour},
	}
	var (
		w        *Worker
		s        *shard
		stopping atomic.Bool
		once     sync.Once
		final    streaming.CheckpointID
		round    = make(chan activities.RoundResult, 1)
		errs     = make(chan error, 1)
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	w, err = NewWorker(ctx, p, WithWorkerID("w1"), WithCheckpointObserver(func(_ streaming.ShardID, st streaming.CheckpointStatus) {
		if !stopping.Load() { // the observer runs on the source's goroutine, under the checkpoint's stage lock
			return
		}
		once.Do(func() {
			final = st.LastID
			// A round arrives while the final checkpoint commits; seen
			// reporting the half-open breaker, it has the shard.
			startRoundOn(context.Background(), t, w, "edge", s, round, errs)
		})
	}))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { _ = w.Close() })

	require.Eventually(t, func() bool { return w.Stats().Subscribed && len(w.host.heldShards()) == 1 }, 10*time.Second, time.Millisecond)
	s = w.host.heldShards()[0]
	for ts := range int64(3) {
		require.NoError(t, b.Server().Publish("sensors/a", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "a", TS: ts + 1, Value: 1}), false, 1))
	}
	require.Eventually(t, func() bool { return w.Stats().RecordsIn == 3 }, 10*time.Second, time.Millisecond)
	stopping.Store(true)
	cancel()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30 s")
	}
	require.NoError(t, err)

	requireRoundNotOwner(t, round, errs, fmt.Sprintf("shard edge/gw-1 at epoch %d: is releasing it", uint64(s.epoch)))
	require.NotZero(t, final)
	require.Equal(t, final, s.cp.Status().LastID, "the shard's last checkpoint is the final one")
}

// startRoundOn starts a coordinator round of pipeline asking w for s's
// checkpoint (its result and error go to round and errs) and returns once
// the round has s: its look-up in the registry reports the half-open
// breaker to the registered checkpointers, under the lock a release's
// unregistering waits for.
func startRoundOn(ctx context.Context, t *testing.T, w *Worker, pipeline string, s *shard, round chan<- activities.RoundResult, errs chan<- error) {
	go func() {
		res, err := w.host.shards.CheckpointRound(ctx, activities.RoundInput{
			Pipeline: pipeline, Round: 7, WorkerID: "w1", Breaker: streaming.BreakerHalfOpen.String(),
			Shards: []activities.ShardEpoch{{Shard: s.id, Epoch: s.epoch}},
		})
		round <- res
		errs <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.cp.Status().Breaker != streaming.BreakerHalfOpen {
		if time.Now().After(deadline) {
			t.Error("the round did not look the shard up within 10 s")
			return
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
}

// requireRoundNotOwner waits for the round startRoundOn started and
// requires its one shard answered not owner, with an error holding want.
func requireRoundNotOwner(t *testing.T, round <-chan activities.RoundResult, errs <-chan error, want string) {
	t.Helper()
	var res activities.RoundResult
	select {
	case res = <-round:
	case <-time.After(30 * time.Second):
		t.Fatal("no round ran at the final checkpoint, or it did not end within 30 s")
	}
	require.NoError(t, <-errs)
	require.Len(t, res.Shards, 1)
	sr := res.Shards[0]
	require.Equal(t, activities.ShardNotOwner, sr.Status, "round's answer for the releasing shard: %+v", sr)
	require.Contains(t, sr.Error, want)
}
