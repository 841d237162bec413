package worker

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/activities"
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
