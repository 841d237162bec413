package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// holdingSink is an archive-like sink that holds a writer per restored
// shard until it is released; failRestore makes its Restore fail.
type holdingSink struct {
	failRestore bool
	mu          sync.Mutex
	held        map[streaming.ShardID]streaming.Epoch
}

func (s *holdingSink) Write(context.Context, []streaming.Output) error { return nil }
func (s *holdingSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	return nil
}
func (s *holdingSink) Close(context.Context) error { return nil }
func (s *holdingSink) CommitCheckpoint(context.Context, streaming.ShardID, streaming.CheckpointID) (parquet.CommitStats, error) {
	return parquet.CommitStats{}, nil
}
func (s *holdingSink) Roll(streaming.ShardID) {}

func (s *holdingSink) Restore(_ context.Context, shard streaming.ShardID, epoch streaming.Epoch, _ streaming.RestoredCut) error {
	if s.failRestore {
		return errors.New("archive bucket unreachable")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[shard] = epoch
	return nil
}

func (s *holdingSink) Release(shard streaming.ShardID, epoch streaming.Epoch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[shard] == epoch {
		delete(s.held, shard)
	}
}

func (s *holdingSink) holds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// TestFailedOpenReleasesTheSinksRestored: when one sink's restore fails,
// the shard is not opened, and the sinks restored before it release the
// shard (an archive sink's writer and its background goroutine). Before,
// they kept it until the worker stopped.
func TestFailedOpenReleasesTheSinksRestored(t *testing.T) {
	ctx := context.Background()
	good := &holdingSink{held: map[streaming.ShardID]streaming.Epoch{}}
	bad := &holdingSink{failRestore: true, held: map[streaming.ShardID]streaming.Epoch{}}
	p := smaPipeline(t, 1)
	p.Sinks = []SinkSpec{Use(good), Use(bad)}
	w, err := NewWorker(ctx, p, WithWorkerID("w1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	id := streaming.KafkaShard("readings", 0)
	_, err = w.openShard(ctx, id, 1, 1, nil, nil, streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 1, true }))
	require.ErrorContains(t, err, "shard readings/0: sinks: archive bucket unreachable")
	require.Zero(t, good.holds(), "the sink restored before the failure released the shard")
}

// TestRestoreRefusesStateOfAnotherGraph: a worker whose graph changed
// node "mean" from sma to ema, restoring a checkpoint of the old graph,
// refused each key's state as it loaded: every key was quarantined (its
// state reset, a warning per key) and the next checkpoint overwrote the
// old state for good. The restore is refused instead, once, naming the
// node and both operators, before any state is read.
func TestRestoreRefusesStateOfAnotherGraph(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	p := smaPipeline(t, 3)
	p.State.Durable.Store = store
	checkpointFiveSensors(ctx, t, p)

	changed := smaPipeline(t, 3)
	changed.State.Durable.Store = store
	changed.Graph.Nodes[0] = Node{Name: "mean", Type: "ema", Params: map[string]any{"period": 3}, Inputs: []string{"value"}}
	w2, err := NewWorker(ctx, changed, WithWorkerID("w1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w2.Close() })
	_, err = w2.openShard(ctx, streaming.KafkaShard("readings", 0), 2, 1, nil, nil, streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 2, true }))
	require.Error(t, err)
	require.ErrorContains(t, err, `load state of operator "ema" (node "mean"): state was saved by operator "sma"`)
	require.ErrorContains(t, err, "start the pipeline on an empty durable store")
	require.Zero(t, w2.Stats().KeysQuarantined)
}

// TestRestoreDropsARemovedNodeWithAllowNonRestoredState: removing a
// stateful node from a spec stopped the worker at restore, and an empty
// durable store lost every node's state. With
// state.allow_non_restored_state the shard opens, the removed node's
// state dropped and the others' restored (each key's, loaded as it is
// used).
func TestRestoreDropsARemovedNodeWithAllowNonRestoredState(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	p := smaPipeline(t, 3)
	p.State.Durable.Store = store
	p.Graph.Nodes = append(p.Graph.Nodes, Node{Name: "slow", Type: "ema", Params: map[string]any{"period": 3}, Inputs: []string{"value"}})
	checkpointFiveSensors(ctx, t, p)

	open := func(allow bool) (*Worker, *shard, error) {
		shrunk := smaPipeline(t, 3)
		shrunk.State.Durable.Store = store
		shrunk.State.AllowNonRestoredState = allow
		w, err := NewWorker(ctx, shrunk, WithWorkerID("w1"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		s, err := w.openShard(ctx, streaming.KafkaShard("readings", 0), 2, 1, nil, nil, streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 2, true }))
		return w, s, err
	}
	_, _, err := open(false)
	require.ErrorContains(t, err, `(node "slow"): saved state belongs to a node the graph no longer has`)

	w2, s, err := open(true)
	require.NoError(t, err)
	for i := range 5 {
		_, err := s.rt.Apply(fmt.Sprintf("s%d", i), 2, streaming.CursorTypeKafka, nil, streaming.Float(4))
		require.NoError(t, err)
		inst, err := s.rt.Apply(fmt.Sprintf("s%d", i), 3, streaming.CursorTypeKafka, nil, streaming.Float(7))
		require.NoError(t, err)
		mean, _ := inst.Value("mean")
		require.InDelta(t, 4, mean.Float64(), 1e-9, "s%d: the mean of the restored 1 and the new 4 and 7 (a window of 3)", i)
	}
	require.Zero(t, w2.Stats().KeysQuarantined)
}

// checkpointFiveSensors runs p's partition 0 over a reading of value 1
// from each of sensors s0..s4, checkpoints it and closes the worker.
func checkpointFiveSensors(ctx context.Context, t *testing.T, p Pipeline) {
	t.Helper()
	w, k := openPartitionZero(ctx, t, p)
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, &kgo.Record{Topic: "readings", Offset: int64(i), Value: fmt.Appendf(nil, `{"sensor":"s%d","ts":1,"value":1}`, i)})
	}
	require.NoError(t, k.apply(ctx, recs))
	_, err := k.cp.Checkpoint(ctx)
	require.NoError(t, err)
	k.close()
	require.NoError(t, w.Close())
}
