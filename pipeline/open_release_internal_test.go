package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
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
