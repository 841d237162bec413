package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
)

// TestReadyComparesOwnedPartitionsNotCounts: a worker whose revoked
// partition's shard is still held (its final checkpoint) while a gained
// one is not open yet holds as many shards as it owns partitions, yet is
// not ready; nor is a worker holding a shard left from an earlier
// ownership of a partition it gained again.
// Before: Ready compared counts and said ready in both cases.
func TestReadyComparesOwnedPartitionsNotCounts(t *testing.T) {
	p := func(n int32) kafka.Partition { return kafka.Partition{Topic: "readings", Partition: n} }
	sh := func(n int32, e streaming.Epoch) *shard {
		return &shard{id: streaming.KafkaShard("readings", n), epoch: e}
	}
	owned := map[kafka.Partition]streaming.Epoch{p(0): 3, p(1): 5}

	require.Empty(t, unrestored(owned, []*shard{sh(0, 3), sh(1, 5)}))
	require.Empty(t, unrestored(owned, []*shard{sh(0, 4), sh(1, 6)}), "an epoch claimed past the assignment's is this ownership's")
	require.Equal(t, []string{"readings/1"}, unrestored(owned, []*shard{sh(0, 3), sh(2, 2)}),
		"partition 2's shard, revoked and still held, stands in for gained partition 1")
	require.Equal(t, []string{"readings/1"}, unrestored(owned, []*shard{sh(0, 3), sh(1, 2)}),
		"partition 1's shard is left from its ownership before epoch 5")
	require.Equal(t, []string{"readings/0", "readings/1"}, unrestored(owned, nil))
	require.Empty(t, unrestored(nil, []*shard{sh(2, 2)}), "a member owning nothing is restored")
}

// TestFinalCheckpointOfAnEarlierEpochSaysWhatTheWorkerKnows: the host
// keeps a shard's last release only, so a final checkpoint asked for an
// earlier epoch says which epoch it holds or last released, not that it
// never held the shard. Before: "never held it at this epoch" for all.
func TestFinalCheckpointOfAnEarlierEpochSaysWhatTheWorkerKnows(t *testing.T) {
	id := streaming.KafkaShard("readings", 0)
	h := &host{pipeline: "p", workerID: "w-1", held: map[streaming.ShardID]*shard{}, released: map[streaming.ShardID]releasedShard{}}
	ctx := t.Context()

	_, err := h.FinalCheckpoint(ctx, "p", id, 2)
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorContains(t, err, "never held it at this epoch")

	h.released[id] = releasedShard{epoch: 5, final: true}
	_, err = h.FinalCheckpoint(ctx, "p", id, 2)
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorContains(t, err, "last released it at epoch 5, and keeps only the last release of a shard")

	h.held[id] = &shard{id: id, epoch: 7}
	_, err = h.FinalCheckpoint(ctx, "p", id, 2)
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorContains(t, err, "holds it at epoch 7 now")
}
