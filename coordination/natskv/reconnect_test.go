package natskv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/natskv"
)

// TestWatchEndsOnAQuickReconnect: a watch checked the connection only
// every poll interval (100 ms by default), so a drop the client recovered
// from between two checks went unnoticed, though the package documents
// that a dropped connection ends the watch (events published while the
// client was away may never have reached it). It now ends on the drop
// itself, whatever the poll interval.
func TestWatchEndsOnAQuickReconnect(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := natskv.Open(ctx, js, "reconnect", natskv.WithLeaseTTL(time.Second), natskv.WithStorage(jetstream.MemoryStorage))
	require.NoError(t, err)
	_, err = s.Create(ctx, coordination.Durable, "a", []byte("v"))
	require.NoError(t, err)
	w, err := s.Watch(ctx, coordination.Durable, "")
	require.NoError(t, err)
	defer w.Close()
	for _, want := range []coordination.EventKind{coordination.EventPut, coordination.EventSnapshotDone} {
		select {
		case ev := <-w.Events():
			require.Equal(t, want, ev.Kind)
		case <-ctx.Done():
			t.Fatal("no snapshot")
		}
	}

	require.NoError(t, nc.ForceReconnect())
	require.Eventually(t, func() bool { return nc.Stats().Reconnects == 1 && nc.IsConnected() }, 10*time.Second, time.Millisecond, "the client reconnects")
	select {
	case _, ok := <-w.Events():
		require.False(t, ok, "no event was written")
	case <-time.After(5 * time.Second):
		t.Fatal("the watch outlived a dropped connection by 5s")
	}
	require.ErrorIs(t, w.Err(), natskv.ErrConnectionLost)
	require.True(t, coordination.IsRetryable(w.Err()), "%v", w.Err())
}
