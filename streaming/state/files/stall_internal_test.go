package files

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// The caller's goroutine never does file I/O: while the I/O goroutines are
// stuck (here: the only one is held by a job standing in for a stalled
// disk), every call gives up at its ctx deadline instead of hanging, and
// nothing it was asked to do takes effect.
func TestCallerGivesUpWhileDiskStalls(t *testing.T) {
	s, err := Open(t.TempDir(), WithIOWorkers(1))
	require.NoError(t, err)
	defer s.Close()

	stalled, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.submit(context.Background(), func() { close(stalled); <-release }))
	<-stalled

	calls := map[string]func(ctx context.Context) error{
		"Save": func(ctx context.Context) error {
			return s.Save(ctx, []byte("k"), streaming.Snapshot{Data: []byte("v")})
		},
		"SaveBatch": func(ctx context.Context) error {
			return s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: []byte("b"), Snapshot: streaming.Snapshot{}}})
		},
		"Load":     func(ctx context.Context) error { _, err := s.Load(ctx, []byte("k")); return err },
		"ListKeys": func(ctx context.Context) error { _, err := s.ListKeys(ctx); return err },
		"Delete":   func(ctx context.Context) error { return s.Delete(ctx, []byte("k")) },
		"SaveCursor": func(ctx context.Context) error {
			return s.SaveCursor(ctx, []byte("c"), streaming.CursorRecord{Epoch: 1})
		},
		"LoadCursor": func(ctx context.Context) error { _, err := s.LoadCursor(ctx, []byte("c")); return err },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := call(ctx)
		cancel()
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", name, err)
	}
	close(release)

	ctx := context.Background()
	_, err = s.Load(ctx, []byte("k"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "the abandoned Save never ran")
	_, err = s.Load(ctx, []byte("b"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "the abandoned SaveBatch never ran")
	require.NoError(t, s.Save(ctx, []byte("k"), streaming.Snapshot{Data: []byte("v")}))
}
