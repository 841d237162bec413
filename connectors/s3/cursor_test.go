package s3_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// Without conditional writes (a server without If-Match support) a
// CursorStore cannot make its read-compare-write atomic, but it still
// compared only with the record it had cached from its own last save: a
// zombie owner that had saved once overwrote the new owner's cursor of a
// newer epoch long after it was written. It now reads the stored record
// before every save in that mode, so an older epoch is refused.
func TestCursorStoreWithoutConditionalWritesFencesAZombie(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	open := func() *s3store.CursorStore {
		cs, err := s3store.NewCursorStore(ctx, testBucket, f.opts(s3store.WithPrefix("c"), s3store.WithConditionalWrites(false))...)
		require.NoError(t, err)
		return cs
	}
	zombie, owner := open(), open()
	key := []byte("kafka/central/readings/0")
	rec := func(epoch streaming.Epoch, id uint64) streaming.CursorRecord {
		return streaming.CursorRecord{Type: "kafka", Cursor: []byte{byte(id)}, Epoch: epoch, CheckpointID: id}
	}
	require.NoError(t, zombie.SaveCursor(ctx, key, rec(1, 1)))
	require.NoError(t, owner.SaveCursor(ctx, key, rec(2, 2)))

	err := zombie.SaveCursor(ctx, key, rec(1, 3))
	require.ErrorIs(t, err, streaming.ErrFenced)
	require.ErrorContains(t, err, "s3://"+testBucket+"/c/cursor/")
	got, err := owner.LoadCursor(ctx, key)
	require.NoError(t, err)
	require.Equal(t, rec(2, 2), got, "the zombie's save changed nothing")
	require.NoError(t, owner.SaveCursor(ctx, key, rec(2, 4)))
}
