package worker

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

// TestBackfillSinkOpenFailures: a sink that could not be opened for a
// passing reason (the InfluxDB server refuses connections or answers 503
// to CREATE DATABASE, no Kafka broker answers) wraps
// activities.ErrSinkUnavailable, so the replay is retried; a refused
// database, a malformed name or a 401 does not, and fails the backfill.
func TestBackfillSinkOpenFailures(t *testing.T) {
	// A port nothing listens on: connections are refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	status := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	for _, tc := range []struct {
		name, url, sink string
		brokers         []string
		unavailable     bool
	}{
		{"influx refuses connections", closed, InfluxSinkName("replay_x/autogen"), nil, true},
		{"influx answers 503", status(http.StatusServiceUnavailable), InfluxSinkName("replay_x/autogen"), nil, true},
		{"influx answers 401", status(http.StatusUnauthorized), InfluxSinkName("replay_x/autogen"), nil, false},
		{"database not allowed", status(http.StatusOK), InfluxSinkName("prod/autogen"), nil, false},
		{"malformed name", status(http.StatusOK), "influx", nil, false},
		{"no broker answers", "", KafkaSinkName("replayed"), []string{l.Addr().String()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &BackfillWorker{URL: tc.url, Brokers: tc.brokers, DatabasePrefixes: []string{"replay_"}}
			defer b.Close(t.Context())
			_, err := b.sink(tc.sink)
			require.Error(t, err)
			require.Equal(t, tc.unavailable, errors.Is(err, activities.ErrSinkUnavailable), "%v", err)
		})
	}
}

// TestBackfillSinkFailedForGoodLeavesTheCache: an Influx sink whose
// bucket does not exist fails for good (streaming.ErrSinkFailed, which the
// backfill does not retry) and leaves the worker's cache: once the bucket
// exists, the next backfill naming it opens it afresh and writes. Before,
// the cache kept the failed sink, and every later backfill failed.
func TestBackfillSinkFailedForGoodLeavesTheCache(t *testing.T) {
	var bucket atomic.Bool
	var written atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/query": // CREATE DATABASE
		case !bucket.Load():
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":"not found","message":"bucket \"replay_x/autogen\" not found"}`))
		default:
			written.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	b := &BackfillWorker{URL: srv.URL}
	defer b.Close(t.Context())
	out := []streaming.Output{{Name: "sma", Key: "s1", TS: 1, Value: 1}}
	name := InfluxSinkName("replay_x/autogen")

	s, err := b.sink(name)
	require.NoError(t, err)
	err = errors.Join(s.Write(t.Context(), out), s.Flush(t.Context(), "", 0))
	require.ErrorIs(t, err, streaming.ErrSinkFailed)
	require.ErrorIs(t, err, influx.ErrNoBucket)

	bucket.Store(true)
	s2, err := b.sink(name)
	require.NoError(t, err)
	require.NotSame(t, s, s2, "the failed sink left the cache")
	require.NoError(t, s2.Write(t.Context(), out))
	require.NoError(t, s2.Flush(t.Context(), "", 0))
	require.Positive(t, written.Load())
}
