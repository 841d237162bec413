package natskv_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/testsuite/coordtest"
)

// startServer runs a JetStream-enabled nats-server on a random loopback port.
func startServer(t testing.TB) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(srv.Shutdown)
	return srv
}

func connect(t testing.TB, srv *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

var jobSeq atomic.Int64

func TestConformance(t *testing.T) {
	srv := startServer(t)
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		nc, js := connect(t, srv)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := natskv.Open(ctx, js, fmt.Sprintf("job%d", jobSeq.Add(1)), natskv.WithLeaseTTL(time.Second), natskv.WithStorage(jetstream.MemoryStorage))
		require.NoError(t, err)
		return coordtest.Harness{
			Store:        s,
			Advance:      func(d time.Duration) { <-time.After(d) }, // real time must pass for a real TTL
			BreakWatches: nc.Close,
			EventWait:    5 * time.Second,
			MaxValueSize: s.MaxValueSize(),
		}
	})
}

func TestOpenRefusesBucketWithOtherTTL(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := context.Background()
	_, err := natskv.Open(ctx, js, "jobttl", natskv.WithLeaseTTL(2*time.Second))
	require.NoError(t, err)
	// Reopening with the same lease works; with another it is Fatal and
	// names both durations.
	_, err = natskv.Open(ctx, js, "jobttl", natskv.WithLeaseTTL(2*time.Second))
	require.NoError(t, err)
	_, err = natskv.Open(ctx, js, "jobttl", natskv.WithLeaseTTL(3*time.Second))
	require.Error(t, err)
	require.True(t, coordination.IsFatal(err), "got %v", err)
	require.ErrorContains(t, err, "2s")
	require.ErrorContains(t, err, "3s")
	require.ErrorContains(t, err, "jobttl_ephemeral")
}

// TestOpenRefusesBucketWithOtherMarkerTTL: a limit marker TTL set with
// WithLimitMarkerTTL is checked against an existing bucket, as the lease
// is (it used to be ignored silently); left unset, the bucket's own holds.
func TestOpenRefusesBucketWithOtherMarkerTTL(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := context.Background()
	_, err := natskv.Open(ctx, js, "jobmarker", natskv.WithLeaseTTL(2*time.Second), natskv.WithLimitMarkerTTL(5*time.Second))
	require.NoError(t, err)
	_, err = natskv.Open(ctx, js, "jobmarker", natskv.WithLeaseTTL(2*time.Second), natskv.WithLimitMarkerTTL(5*time.Second))
	require.NoError(t, err)
	_, err = natskv.Open(ctx, js, "jobmarker", natskv.WithLeaseTTL(2*time.Second))
	require.NoError(t, err, "unset, the bucket's marker TTL holds")
	_, err = natskv.Open(ctx, js, "jobmarker", natskv.WithLeaseTTL(2*time.Second), natskv.WithLimitMarkerTTL(7*time.Second))
	require.Error(t, err)
	require.True(t, coordination.IsFatal(err), "got %v", err)
	require.ErrorContains(t, err, "5s")
	require.ErrorContains(t, err, "7s")
	require.ErrorContains(t, err, "jobmarker_ephemeral")
}

func TestOpenRefusesBucketWithoutMarkers(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := context.Background()
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "old_ephemeral", TTL: 2 * time.Second})
	require.NoError(t, err)
	_, err = natskv.Open(ctx, js, "old", natskv.WithLeaseTTL(2*time.Second))
	require.True(t, coordination.IsFatal(err), "got %v", err)
	require.ErrorContains(t, err, "limit marker")
}

// oldServer reports the JetStream API level of a server before 2.11 — the
// one field Open consults to decide whether per-message TTLs exist.
type oldServer struct{ jetstream.JetStream }

func (o oldServer) AccountInfo(ctx context.Context) (*jetstream.AccountInfo, error) {
	info, err := o.JetStream.AccountInfo(ctx)
	if err != nil {
		return nil, err
	}
	info.API.Level = 0
	return info, nil
}

func TestOpenRefusesServerWithoutMessageTTL(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	_, err := natskv.Open(context.Background(), oldServer{js}, "jobold")
	require.Error(t, err)
	require.True(t, coordination.IsFatal(err), "got %v", err)
	require.ErrorContains(t, err, natskv.MinServerVersion)
	require.ErrorContains(t, err, "API level 0")
}

func TestOpenValidatesOptions(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	for name, tc := range map[string]struct {
		job string
		opt natskv.Option
	}{
		"bad job":       {"a.b", natskv.WithLeaseTTL(time.Second)},
		"short lease":   {"j", natskv.WithLeaseTTL(100 * time.Millisecond)},
		"short markers": {"j", natskv.WithLimitMarkerTTL(10 * time.Millisecond)},
		"no replicas":   {"j", natskv.WithReplicas(0)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := natskv.Open(context.Background(), js, tc.job, tc.opt)
			require.True(t, coordination.IsFatal(err), "got %v", err)
		})
	}
}

func TestServerDownIsRetryable(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	s, err := natskv.Open(context.Background(), js, "down", natskv.WithLeaseTTL(time.Second))
	require.NoError(t, err)
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = s.Create(ctx, coordination.Durable, "k", []byte("v"))
	require.Error(t, err)
	require.True(t, coordination.IsRetryable(err), "got %v", err)
}

// failingGets is a JetStream whose KeyValue handles (of buckets that
// exist) fail Get while fail is set, as a read cut off by a lost
// connection does.
type failingGets struct {
	jetstream.JetStream
	fail *atomic.Bool
}

func (f failingGets) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := f.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return failingGetKV{kv, f.fail}, nil
}

type failingGetKV struct {
	jetstream.KeyValue
	fail *atomic.Bool
}

func (f failingGetKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.fail.Load() {
		return nil, nats.ErrTimeout
	}
	return f.KeyValue.Get(ctx, key)
}

// TestDeleteErrorNamesDelete: a guarded delete that loses reads the key to
// tell a vacuous win from a loss; when that read fails, the error is
// Delete's (it used to name op "get", which the caller never called).
func TestDeleteErrorNamesDelete(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := context.Background()
	_, err := natskv.Open(ctx, js, "deleteop", natskv.WithLeaseTTL(time.Second)) // creates the buckets
	require.NoError(t, err)
	var fail atomic.Bool
	s, err := natskv.Open(ctx, failingGets{js, &fail}, "deleteop", natskv.WithLeaseTTL(time.Second))
	require.NoError(t, err)
	first, err := s.Create(ctx, coordination.Durable, "k", []byte("v1"))
	require.True(t, first.Won())
	require.NoError(t, err)
	second, err := s.Update(ctx, coordination.Durable, "k", []byte("v2"), first.Revision())
	require.NoError(t, err)
	require.True(t, second.Won())

	fail.Store(true)
	out, err := s.Delete(ctx, coordination.Durable, "k", first.Revision()) // stale guard: loses
	require.Error(t, err, "delete: %v", out)
	require.True(t, coordination.IsRetryable(err), "got %v", err)
	var se *coordination.StoreError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "delete", se.Op, "got %v", err)
	require.Equal(t, "k", se.Key)
}

// TestOpenRefusesDurableBucketWithATTL: a durable bucket created with an
// age limit (by hand, say, copying the ephemeral one's settings) was
// accepted, and split progress records, the plan and specs, which must
// never expire, vanished a TTL after their last write.
func TestOpenRefusesDurableBucketWithATTL(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := context.Background()
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "aged_durable", TTL: time.Hour})
	require.NoError(t, err)
	_, err = natskv.Open(ctx, js, "aged", natskv.WithLeaseTTL(2*time.Second))
	require.Error(t, err)
	require.True(t, coordination.IsFatal(err), "got %v", err)
	require.ErrorContains(t, err, "aged_durable")
	require.ErrorContains(t, err, "1h0m0s")
}
