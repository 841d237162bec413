package s3_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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

// A cursor save whose request stalled held the store's one lock, so every
// other shard's cursor save in the process waited for it, past its own
// deadline, until the stalled call's caller gave up. Saves of different
// keys now run side by side, and a save waiting behind one of its own key
// gives up at its ctx.
func TestCursorStoreStalledSaveHoldsOnlyItsKey(t *testing.T) {
	stalledKey := []byte("kafka/central/readings/0")
	stalledObj := "/c/cursor/k-" + hex.EncodeToString(stalledKey)
	release, held := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, stalledObj) {
				heldOnce.Do(func() { close(held) })
				select {
				case <-r.Context().Done():
					return
				case <-release:
				}
			}
			fake.ServeHTTP(w, r)
		})
	})
	unstall := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unstall)
	ctx := context.Background()
	cs, err := s3store.NewCursorStore(ctx, testBucket, f.opts(s3store.WithPrefix("c"))...)
	require.NoError(t, err)
	rec := streaming.CursorRecord{Type: "kafka", Cursor: []byte{1}, Epoch: 1, CheckpointID: 1}

	stalled := make(chan error, 1)
	go func() { stalled <- cs.SaveCursor(ctx, stalledKey, rec) }()
	<-held

	other := make(chan error, 1)
	go func() { other <- cs.SaveCursor(ctx, []byte("kafka/central/readings/1"), rec) }()
	var otherErr error
	require.Eventually(t, func() bool {
		select {
		case otherErr = <-other:
			return true
		default:
			return false
		}
	}, 10*time.Second, 5*time.Millisecond, "another key's save waits for the stalled one")
	require.NoError(t, otherErr)

	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	same := make(chan error, 1)
	go func() { same <- cs.SaveCursor(sctx, stalledKey, rec) }()
	var sameErr error
	require.Eventually(t, func() bool {
		select {
		case sameErr = <-same:
			return true
		default:
			return false
		}
	}, 10*time.Second, 5*time.Millisecond, "a save of the stalled key waits past its deadline")
	require.ErrorIs(t, sameErr, context.DeadlineExceeded)

	unstall()
	require.NoError(t, <-stalled)
	got, err := cs.LoadCursor(ctx, stalledKey)
	require.NoError(t, err)
	require.Equal(t, rec, got)
}
