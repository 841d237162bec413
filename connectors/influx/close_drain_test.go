package influx_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/influx"
)

// TestCloseRefusesWriterWokenByTheDrain: Close refuses new writes before it drains, so a writer
// blocked on back-pressure gets ErrClosed instead of a false success.
// Before (the bug this guards against):
// a writer blocked on back-pressure while Close drains the sink is woken
// by the drain, buffers its points and returns nil; Close then stops the
// sender and returns nil too, and those points are never sent: data lost
// with both calls reporting success.
func TestCloseRefusesWriterWokenByTheDrain(t *testing.T) {
	var reqs atomic.Int64
	var lines atomic.Int64
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/write") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		n := reqs.Add(1)
		body, _ := io.ReadAll(r.Body)
		if int(n) <= len(gates) {
			<-gates[n-1]
		}
		lines.Add(int64(strings.Count(strings.TrimSpace(string(body)), "\n") + 1))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	defer func() {
		for _, g := range gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	}()

	s, err := influx.NewSink(srv.URL, "db/autogen", influx.WithBatchSize(2), influx.WithMaxPendingBatches(1),
		influx.WithFlushInterval(time.Hour))
	require.NoError(t, err)
	ctx := context.Background()
	m := measurement("closerace")
	// Batch 0 sealed and in flight (held by gate 0); batch 1 full in cur.
	require.NoError(t, s.Write(ctx, genPoints(m, 0, 4)...))
	require.Eventually(t, func() bool { return reqs.Load() == 1 }, 10*time.Second, time.Millisecond)

	// A writer with 2 more points: cur is full and the queue too, so it
	// blocks on back-pressure.
	werr := make(chan error, 1)
	go func() { werr <- s.Write(ctx, genPoints(m, 4, 2)...) }()

	cerr := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cerr <- s.Close(cctx)
	}()
	// Close's drain seals batch 1 (target: batches 0 and 1). Let batch 0
	// through: the room it frees wakes the writer.
	close(gates[0])
	var wErr error
	select {
	case wErr = <-werr:
	case <-time.After(30 * time.Second):
		t.Fatal("writer never returned")
	}
	close(gates[1])
	var cErr error
	select {
	case cErr = <-cerr:
	case <-time.After(30 * time.Second):
		t.Fatal("Close never returned")
	}
	if wErr == nil && cErr == nil {
		require.Equal(t, int64(6), lines.Load(),
			"Write and Close both returned nil, but only %d of 6 points reached the server (stats %+v)", lines.Load(), s.Stats())
	}
}
