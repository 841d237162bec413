package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// failed part-way (here the state database fails the read of a new key)
// has changed the keys before the failing record without moving the
// cursor, so no checkpoint is taken after it: neither a round's nor the
// final one of the release that follows (the failed source leaves its
// group, which revokes the partition). Bug: the release's saved those
// changes with the old cursor, and the next owner applied the records
// again.
func TestFailedChunkIsNotCheckpointedOnRelease(t *testing.T) {
	ctx := context.Background()
	p := smaPipeline(t, 3)
	w, k := openPartitionZero(ctx, t, p)
	rec := func(off int64, sensor string) *kgo.Record {
		return &kgo.Record{Topic: "readings", Offset: off, Value: fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":1}`, sensor, off+1)}
	}
	require.NoError(t, k.apply(ctx, []*kgo.Record{rec(0, "a")}))
	_, err := k.cp.Checkpoint(ctx)
	require.NoError(t, err)
	first := k.cp.Status().LastID

	require.NoError(t, w.db.Close()) // a's state is cached; b's read fails
	require.Error(t, k.apply(ctx, []*kgo.Record{rec(1, "a"), rec(2, "b")}))
	_, err = k.cp.Checkpoint(ctx) // a round that comes before the release
	require.ErrorContains(t, err, "failed part-way")
	err = k.Release(ctx, true)
	require.Error(t, err, "the release reports the checkpoint it did not take")
	require.Equal(t, first, k.cp.Status().LastID, "no checkpoint after the failed chunk")
}
