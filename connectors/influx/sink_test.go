package influx_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/influxtest"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

const baseTS = int64(1_767_225_600_000_000_000) // 2026-01-01T00:00:00Z

// genPoints returns n points of measurement m: 10 sensors, modes 0..2,
// one point per millisecond from baseTS + from ms.
func genPoints(m string, from, n int) []influx.Point {
	pts := make([]influx.Point, n)
	for i := range pts {
		k := from + i
		pts[i] = influx.Point{
			Measurement: m,
			Sensor:      fmt.Sprintf("s%02d", k%10),
			Mode:        fmt.Sprint(k % 3),
			TS:          baseTS + int64(k)*1_000_000,
			Fields:      []influx.Field{{Key: "value", Value: streaming.Float(float64(k) / 4)}},
		}
	}
	return pts
}

func newSink(t *testing.T, url, bucket string, opts ...influx.Option) *influx.Sink {
	t.Helper()
	s, err := influx.NewSink(url, bucket, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

type readPoint struct {
	sensor, mode string
	ts           int64
	value        float64
}

// readBack reads measurement m with the client's Flux query API.
func readBack(t *testing.T, url, token, bucket, m string) []readPoint {
	t.Helper()
	c := influxdb2.NewClient(url, token)
	defer c.Close()
	q := fmt.Sprintf(`from(bucket: %q) |> range(start: 2025-12-31T00:00:00Z, stop: 2026-01-02T00:00:00Z) |> filter(fn: (r) => r._measurement == %q and r._field == "value")`, bucket, m)
	res, err := c.QueryAPI("").Query(context.Background(), q)
	require.NoError(t, err)
	var out []readPoint
	for res.Next() {
		r := res.Record()
		out = append(out, readPoint{sensor: r.ValueByKey("sensor").(string), mode: r.ValueByKey("mode").(string), ts: r.Time().UnixNano(), value: r.Value().(float64)})
	}
	require.NoError(t, res.Err())
	sort.Slice(out, func(i, j int) bool { return out[i].ts < out[j].ts })
	return out
}

func wantPoints(pts []influx.Point) []readPoint {
	out := make([]readPoint, len(pts))
	for i, p := range pts {
		out[i] = readPoint{p.Sensor, p.Mode, p.TS, p.Fields[0].Value.Float64()}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ts < out[j].ts })
	return out
}

func TestSinkWriteAndReadBack(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	cases := []struct {
		name      string
		batch     int
		points    int
		interval  time.Duration
		chunk     int
		useFlush  bool
		wantBatch int64
	}{
		{"full batches and a flush", 100, 1050, time.Hour, 37, true, 11},
		{"interval flush only", 1000, 25, 20 * time.Millisecond, 5, false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := measurement(strings.ReplaceAll(c.name, " ", "_"))
			s := newSink(t, srv.URL, "tflo/autogen", influx.WithBatchSize(c.batch), influx.WithFlushInterval(c.interval))
			pts := genPoints(m, 0, c.points)
			ctx := context.Background()
			for i := 0; i < len(pts); i += c.chunk {
				require.NoError(t, s.Write(ctx, pts[i:min(i+c.chunk, len(pts))]...))
			}
			if c.useFlush {
				require.NoError(t, s.Flush(ctx))
			} else {
				require.Eventually(t, func() bool { return s.Stats().Points == int64(c.points) }, 10*time.Second, 10*time.Millisecond,
					"the interval never flushed the partial batch")
			}
			st := s.Stats()
			require.Equal(t, int64(c.points), st.Points)
			require.Equal(t, c.wantBatch, st.Batches)
			require.Equal(t, 0, st.Buffered)
			require.Equal(t, wantPoints(pts), readBack(t, srv.URL, "", "tflo/autogen", m))
		})
	}
}

// A replayed batch (the same records processed again after a restore)
// must overwrite, never duplicate.
func TestSinkReplayOverwrites(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	s := newSink(t, srv.URL, "tflo/autogen", influx.WithBatchSize(64))
	ctx := context.Background()
	m := measurement("replay")
	pts := genPoints(m, 0, 300)
	require.NoError(t, s.Write(ctx, pts...))
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, 300, srv.Count(t, "tflo", m))
	// Replay an overlapping range: the last 100 again plus 50 new.
	require.NoError(t, s.Write(ctx, genPoints(m, 200, 150)...))
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, 350, srv.Count(t, "tflo", m))
	require.Equal(t, wantPoints(genPoints(m, 0, 350)), readBack(t, srv.URL, "", "tflo/autogen", m))
}

// The server dies in the middle of a stream: the breaker opens, Write
// blocks once the bounded buffer is full (back-pressure), and after the
// server comes back (same data, same port) every point is there.
func TestSinkServerDownMidWrite(t *testing.T) {
	srv := influxtest.Start(t)
	srv.CreateDatabase(t, "tflo")
	const batch, pending = 50, 2
	s := newSink(t, srv.URL, "tflo/autogen",
		influx.WithBatchSize(batch), influx.WithMaxPendingBatches(pending), influx.WithFlushInterval(20*time.Millisecond),
		influx.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), influx.WithBreaker(3, 100*time.Millisecond),
		influx.WithRequestTimeout(2*time.Second))
	ctx := context.Background()
	first := genPoints("down", 0, 500)
	require.NoError(t, s.Write(ctx, first...))
	require.NoError(t, s.Flush(ctx))

	srv.Stop()
	rest := genPoints("down", 500, 1000)
	var written sync.WaitGroup
	var progress sync.Mutex
	done := 0
	var writeErr error
	written.Add(1)
	go func() {
		defer written.Done()
		for i := 0; i < len(rest); i += 10 {
			if err := s.Write(ctx, rest[i:i+10]...); err != nil {
				writeErr = err
				return
			}
			progress.Lock()
			done = i + 10
			progress.Unlock()
		}
	}()
	require.Eventually(t, func() bool { return s.Stats().BreakerOpened >= 1 }, 20*time.Second, 5*time.Millisecond, "breaker never opened")
	// Back-pressure: the writer stalls with at most (pending+1) batches buffered.
	bound := (pending + 1) * batch
	require.Eventually(t, func() bool { return s.Stats().Buffered == bound }, 20*time.Second, 5*time.Millisecond, "buffer never filled")
	st := s.Stats()
	progress.Lock()
	stalledAt := done
	progress.Unlock()
	require.Less(t, stalledAt, len(rest), "Write did not block while the server was down")
	require.LessOrEqual(t, st.Buffered, bound)
	require.NotEqual(t, "closed", st.Breaker)

	srv.Restart(t)
	written.Wait()
	require.NoError(t, writeErr)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, s.Flush(fctx))
	require.Equal(t, 1500, srv.Count(t, "tflo", "down"))
	require.Equal(t, wantPoints(genPoints("down", 0, 1500)), readBack(t, srv.URL, "", "tflo/autogen", "down"))
	require.Equal(t, "closed", s.Stats().Breaker)
	require.Greater(t, s.Stats().Retries, int64(0))
}

func TestSinkWrongCredentials(t *testing.T) {
	const password = "s3cret-Pa55"
	srv := influxtest.Start(t, influxtest.WithAuth("admin", password))
	srv.CreateDatabase(t, "tflo")
	ctx := context.Background()

	t.Run("right password writes", func(t *testing.T) {
		s := newSink(t, srv.URL, "tflo/autogen", influx.WithUserPassword("admin", password))
		require.NoError(t, s.Write(ctx, genPoints("auth", 0, 20)...))
		require.NoError(t, s.Flush(ctx))
		require.Equal(t, 20, srv.Count(t, "tflo", "auth"))
	})

	t.Run("wrong password fails once, clearly", func(t *testing.T) {
		const wrong = "not-the-Pa55word"
		var logs logtest.Buffer
		s := newSink(t, srv.URL, "tflo/autogen", influx.WithUserPassword("admin", wrong), influx.WithBatchSize(5),
			influx.WithRetryBackoff(time.Millisecond, time.Millisecond),
			influx.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		require.NoError(t, s.Write(ctx, genPoints("auth", 100, 5)...))
		err := s.Flush(ctx)
		require.Error(t, err)
		require.ErrorIs(t, err, influx.ErrUnauthorized)
		var we *influx.WriteError
		require.ErrorAs(t, err, &we)
		require.Equal(t, 401, we.StatusCode)
		msg := err.Error()
		require.Contains(t, msg, srv.URL)
		require.Contains(t, msg, "HTTP 401")
		require.NotContains(t, msg, wrong)
		require.NotContains(t, msg, password)
		// No retry storm: one request, and the sink stays failed.
		require.Equal(t, int64(1), s.Stats().Requests)
		require.ErrorIs(t, s.Write(ctx, genPoints("auth", 200, 1)...), influx.ErrUnauthorized)
		require.Equal(t, int64(1), s.Stats().Requests)
		require.Equal(t, 20, srv.Count(t, "tflo", "auth"))
		// The failure is logged, without the secret.
		require.Contains(t, logs.String(), "influx sink failed")
		require.Contains(t, logs.String(), "401")
		require.NotContains(t, logs.String(), wrong)
	})
}

func TestSinkMissingDatabase(t *testing.T) {
	srv := sharedServer(t)
	s := newSink(t, srv.URL, "nope/autogen")
	require.NoError(t, s.Write(context.Background(), genPoints(measurement("x"), 0, 3)...))
	err := s.Flush(context.Background())
	require.ErrorIs(t, err, influx.ErrNoBucket)
	require.Contains(t, err.Error(), `"nope/autogen"`)
}

// TestSinkMissingRetentionPolicy: InfluxDB 1.8 answers a write to a
// retention policy the database lacks ("db/typo") with HTTP 500, which the
// sink retried until Flush's ctx ended ("context deadline exceeded",
// naming neither the bucket nor the problem). It now fails the sink at
// once with ErrNoBucket, as a missing database does.
func TestSinkMissingRetentionPolicy(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	s := newSink(t, srv.URL, "tflo/nope", influx.WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	require.NoError(t, s.Write(context.Background(), genPoints(measurement("x"), 0, 3)...))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Flush(ctx)
	require.ErrorIs(t, err, influx.ErrNoBucket)
	require.Contains(t, err.Error(), `"tflo/nope"`)
	require.Contains(t, err.Error(), "retention policy not found")
	require.Equal(t, int64(1), s.Stats().Requests, "not retried")
}

func TestNewSinkValidates(t *testing.T) {
	cases := []struct {
		name, url, bucket string
		opts              []influx.Option
		want              string
	}{
		{"bad scheme", "ftp://x", "b", nil, "scheme"},
		{"no host", "http://", "b", nil, "no host"},
		{"password in bad url not echoed", "http://u:hunter2@%zz", "b", nil, "not a valid URL"},
		{"empty bucket", "http://127.0.0.1:1", "", nil, "empty bucket"},
		{"batch size", "http://127.0.0.1:1", "b", []influx.Option{influx.WithBatchSize(0)}, "batch size"},
		{"backoff", "http://127.0.0.1:1", "b", []influx.Option{influx.WithRetryBackoff(time.Second, time.Millisecond)}, "retry backoff"},
		{"breaker", "http://127.0.0.1:1", "b", []influx.Option{influx.WithBreaker(0, time.Second)}, "breaker"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := influx.NewSink(c.url, c.bucket, c.opts...)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func TestSinkCloseReleasesBlockedWriter(t *testing.T) {
	// Nothing listens on this port: every request fails, so the buffer fills.
	s, err := influx.NewSink("http://127.0.0.1:1", "db/rp", influx.WithBatchSize(2), influx.WithMaxPendingBatches(1),
		influx.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), influx.WithBreaker(2, 20*time.Millisecond))
	require.NoError(t, err)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() { errc <- s.Write(ctx, genPoints("c", 0, 100)...) }()
	require.Eventually(t, func() bool { return s.Stats().Buffered == 4 }, 10*time.Second, time.Millisecond)
	// A writer with a deadline gives up, and says so.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = s.Write(wctx, genPoints("c", 500, 3)...)
	wcancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "waiting for buffer room")
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Close(cctx), context.DeadlineExceeded)
	select {
	case err := <-errc:
		require.True(t, errors.Is(err, influx.ErrClosed), "blocked Write returned %v, want ErrClosed", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not release the blocked writer")
	}
	require.ErrorIs(t, s.Write(ctx, genPoints("c", 0, 1)...), influx.ErrClosed)
	require.NoError(t, s.Close(ctx), "second Close")
}
