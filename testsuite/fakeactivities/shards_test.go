package fakeactivities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
)

// TestMemoryShardsSmallValues: Touch wrote an 8-byte counter into
// values shorter than that and panicked (index out of range) for any
// valueBytes under 8, which NewMemoryShards takes.
func TestMemoryShardsSmallValues(t *testing.T) {
	ctx := context.Background()
	for _, valueBytes := range []int{0, 1, 7, 8} {
		ms, err := fakeactivities.NewMemoryShards("small", 2, 3, valueBytes, memory.New(), "w1")
		require.NoError(t, err)
		for _, cp := range ms.Checkpointers {
			_, err := cp.Checkpoint(ctx)
			require.NoError(t, err, "valueBytes %d", valueBytes)
		}
		require.NotPanics(t, ms.Touch, "valueBytes %d", valueBytes)
		for _, cp := range ms.Checkpointers {
			res, err := cp.Checkpoint(ctx)
			require.NoError(t, err, "valueBytes %d", valueBytes)
			require.Positive(t, res.Bytes, "valueBytes %d: a touched shard writes its keys", valueBytes)
		}
	}
}
