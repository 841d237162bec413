package influx_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

// faultProxy forwards to a real influxd and answers the first len(faults)
// write requests itself with the given status codes (and a Retry-After
// header for 429), so the sink sees the real server's protocol with
// injected overload.
type faultProxy struct {
	mu     sync.Mutex
	faults []int
	times  []time.Time // arrival of every write request
	writes atomic.Int64
}

func (f *faultProxy) handler(target string) http.Handler {
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/write") {
			f.writes.Add(1)
			f.mu.Lock()
			f.times = append(f.times, time.Now())
			var code int
			if len(f.faults) > 0 {
				code, f.faults = f.faults[0], f.faults[1:]
			}
			f.mu.Unlock()
			if code != 0 {
				if code == http.StatusTooManyRequests {
					w.Header().Set("Retry-After", "1")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				w.Write([]byte(`{"code":"unavailable","message":"injected"}`))
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})
}

func TestSinkRetriesOverloadAndHonoursRetryAfter(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	fp := &faultProxy{faults: []int{503, 500, 429}}
	proxy := httptest.NewServer(fp.handler(srv.URL))
	defer proxy.Close()

	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithBatchSize(100),
		influx.WithRetryBackoff(5*time.Millisecond, 10*time.Millisecond), influx.WithBreaker(10, time.Second))
	ctx := context.Background()
	m := measurement("overload")
	pts := genPoints(m, 0, 100)
	require.NoError(t, s.Write(ctx, pts...))
	require.NoError(t, s.Flush(ctx))
	st := s.Stats()
	require.Equal(t, int64(3), st.Retries)
	require.Equal(t, int64(4), st.Requests)
	require.Equal(t, int64(4), fp.writes.Load())
	require.Equal(t, 100, srv.Count(t, "tflo", m))
	fp.mu.Lock()
	gap := fp.times[3].Sub(fp.times[2])
	fp.mu.Unlock()
	require.GreaterOrEqual(t, gap, time.Second, "retry after a 429 with Retry-After: 1 came after %v", gap)
}

// TestSinkGivingUpSaysWhy: a Flush (or a Write waiting for room) whose
// ctx ended while the server kept failing said only "flush (breaker
// open): context deadline exceeded": not the bucket, not what the server
// answered. It now names the bucket and the last failed attempt.
func TestSinkGivingUpSaysWhy(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	faults := make([]int, 100000)
	for i := range faults {
		faults[i] = http.StatusServiceUnavailable
	}
	fp := &faultProxy{faults: faults}
	proxy := httptest.NewServer(fp.handler(srv.URL))
	t.Cleanup(proxy.Close) // after the sink's Close
	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithBatchSize(1), influx.WithMaxPendingBatches(1),
		influx.WithRetryBackoff(time.Millisecond, 2*time.Millisecond), influx.WithBreaker(3, 10*time.Millisecond))
	m := measurement("why")
	require.NoError(t, s.Write(context.Background(), genPoints(m, 0, 2)...))
	require.Eventually(t, func() bool { return s.Stats().Retries > 0 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Write(ctx, genPoints(m, 2, 1)...)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), `"tflo/autogen"`)
	require.Contains(t, err.Error(), "HTTP 503: injected")

	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = s.Flush(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), `"tflo/autogen"`)
	require.Contains(t, err.Error(), "HTTP 503: injected")
	require.ErrorIs(t, s.Close(ctx), context.DeadlineExceeded) // the points are dropped: the test is done with them
}

// The breaker opens after the threshold and, while open, holds requests
// back for the cool-down instead of hammering the server.
func TestSinkBreakerHoldsBackDuringCoolDown(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	fp := &faultProxy{faults: []int{503, 503, 503}}
	proxy := httptest.NewServer(fp.handler(srv.URL))
	defer proxy.Close()
	const coolDown = 300 * time.Millisecond
	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithBatchSize(10),
		influx.WithRetryBackoff(time.Millisecond, 2*time.Millisecond), influx.WithBreaker(3, coolDown))
	ctx := context.Background()
	m := measurement("breaker")
	require.NoError(t, s.Write(ctx, genPoints(m, 0, 10)...))
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, int64(1), s.Stats().BreakerOpened)
	require.Equal(t, "closed", s.Stats().Breaker)
	fp.mu.Lock()
	defer fp.mu.Unlock()
	require.Len(t, fp.times, 4)
	require.GreaterOrEqual(t, fp.times[3].Sub(fp.times[2]), coolDown, "probe sent before the cool-down ended")
	require.Equal(t, 10, srv.Count(t, "tflo", m))
}

// Bad data (here a field type conflict: InfluxDB answers 400 partial
// write) goes to the dead-letter hook with the reason; the sink keeps
// going and later batches are written.
func TestSinkRejectedBatchGoesToHook(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	var mu sync.Mutex
	var rejected []string
	var rejErr *influx.WriteError
	s := newSink(t, srv.URL, "tflo/autogen", influx.WithBatchSize(1), influx.WithOnReject(func(err *influx.WriteError, lines []byte) {
		mu.Lock()
		defer mu.Unlock()
		rejErr = err
		rejected = append(rejected, string(lines))
	}))
	ctx := context.Background()
	m := measurement("typed")
	good := genPoints(m, 0, 1)
	bad := influx.Point{Measurement: m, Sensor: "s00", Mode: "0", TS: baseTS + 1, Fields: []influx.Field{{Key: "value", Value: streaming.Int(5)}}}
	require.NoError(t, s.Write(ctx, good...))
	require.NoError(t, s.Write(ctx, bad))
	require.NoError(t, s.Write(ctx, genPoints(m, 2, 3)...))
	require.NoError(t, s.Flush(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, rejected, 1)
	require.Equal(t, m+",mode=0,sensor=s00 value=5i 1767225600000000001", rejected[0])
	require.ErrorIs(t, rejErr, influx.ErrRejected)
	require.Equal(t, 400, rejErr.StatusCode)
	require.Contains(t, rejErr.Error(), "field type conflict")
	st := s.Stats()
	require.Equal(t, int64(1), st.Rejected)
	require.Equal(t, int64(4), st.Points)
	require.Equal(t, 4, srv.Count(t, "tflo", m))
}

// TLS: with the server's CA the sink writes through an https endpoint;
// without it the certificate error fails the sink at once (no retries).
func TestSinkTLS(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	fp := &faultProxy{}
	proxy := httptest.NewTLSServer(fp.handler(srv.URL))
	defer proxy.Close()
	ctx := context.Background()
	m := measurement("tls")

	pool := x509.NewCertPool()
	pool.AddCert(proxy.Certificate())
	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	require.NoError(t, s.Write(ctx, genPoints(m, 0, 10)...))
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, 10, srv.Count(t, "tflo", m))

	untrusting := newSink(t, proxy.URL, "tflo/autogen")
	require.NoError(t, untrusting.Write(ctx, genPoints(m, 10, 10)...))
	err := untrusting.Flush(ctx)
	require.ErrorIs(t, err, influx.ErrTLS)
	require.Contains(t, err.Error(), proxy.URL)
	require.Equal(t, int64(1), untrusting.Stats().Requests)
}

// A checkpoint's pre-commit (Flush) must complete while the hot path
// keeps the sink's queue full: Flush used to wait for queue room to seal
// its batch, and the writers, woken by the same room, took it first every
// time (the central worker's checkpoints stopped completing under load:
// 1 in 10 s, BenchmarkCentralArchive). Here writers saturate a sink whose
// server takes 5 ms a request, and five Flushes in a row must each
// return, each within a minute (a liveness bound: one takes a few
// requests), while the writers go on writing.
func TestFlushCompletesWhileWritersSaturate(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	fwd := httputil.NewSingleHostReverseProxy(u)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/write") {
			time.Sleep(5 * time.Millisecond) // the slow server under test, not a synchronisation
		}
		fwd.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithBatchSize(200), influx.WithMaxPendingBatches(2))
	m := measurement("saturated")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var written atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if err := s.Write(ctx, genPoints(m, (w*1_000_000+i*50)%1_000_000, 50)...); err != nil {
					return
				}
				written.Add(50)
			}
		}()
	}
	// Saturated: the queue is full and the writers wait for room.
	require.Eventually(t, func() bool { return s.Stats().Buffered >= 3*200 }, time.Minute, time.Millisecond)
	for i := range 5 {
		before := written.Load()
		fctx, fcancel := context.WithTimeout(context.Background(), time.Minute)
		err := s.Flush(fctx)
		fcancel()
		require.NoError(t, err, "flush %d while the writers saturate the sink", i)
		require.Greater(t, written.Load(), before, "the writers stalled during flush %d: the test did not saturate", i)
	}
	cancel()
	wg.Wait()
}

// A server with a small request-size limit (413) gets the batch split in
// halves until each request fits: every point lands, none goes to the
// dead-letter hook. Only a line too large by itself is rejected.
func TestSinkSplitsRequestTooLarge(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	u, _ := url.Parse(srv.URL)
	forward := httputil.NewSingleHostReverseProxy(u)
	const maxLines = 30
	var tooLarge, forwarded atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/write") {
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			if strings.Count(string(body), "\n")+1 > maxLines || bytes.Contains(body, []byte("huge")) {
				tooLarge.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				w.Write([]byte(`{"code":"request too large","message":"injected: body over the limit"}`))
				return
			}
			forwarded.Add(1)
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	var mu sync.Mutex
	var rejected []string
	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithBatchSize(100), influx.WithOnReject(func(err *influx.WriteError, lines []byte) {
		mu.Lock()
		defer mu.Unlock()
		rejected = append(rejected, string(lines))
	}))
	ctx := context.Background()
	m := measurement("split")
	pts := genPoints(m, 0, 100)
	pts[57].Sensor = "huge" // too large on its own
	require.NoError(t, s.Write(ctx, pts...))
	require.NoError(t, s.Flush(ctx))

	require.Equal(t, 99, srv.Count(t, "tflo", m), "every point but the huge one lands")
	mu.Lock()
	require.Len(t, rejected, 1)
	require.Contains(t, rejected[0], "sensor=huge")
	require.NotContains(t, rejected[0], "\n", "only the huge line is rejected")
	mu.Unlock()
	st := s.Stats()
	require.Equal(t, int64(1), st.Rejected)
	require.Equal(t, int64(99), st.Points)
	require.Greater(t, tooLarge.Load(), int64(1))
	require.Greater(t, forwarded.Load(), int64(3), "100 points in requests of at most %d", maxLines)
}

// WithRequestTimeout bounds a request by the duration it is given: a
// request the server holds is given up after 1.9 s, not after the whole
// seconds of the client library's own timeout (it was cut to 1 s).
func TestSinkRequestTimeoutIsNotRoundedDown(t *testing.T) {
	const timeout = 1900 * time.Millisecond
	held := make(chan time.Duration, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/write") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		start := time.Now()
		// With the body read, the server notices the client hang up.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // held until the client gives up
		held <- time.Since(start)
	}))
	defer srv.Close()
	s := newSink(t, srv.URL, "tflo/autogen", influx.WithRequestTimeout(timeout))
	require.NoError(t, s.Write(context.Background(), genPoints(measurement("timeout"), 0, 1)...))
	ctx, cancel := context.WithCancel(context.Background())
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	select {
	case d := <-held:
		// A lower bound only, with room for the request's way to the
		// handler: the client cannot give up early, however loaded the
		// machine.
		require.GreaterOrEqual(t, d, timeout-500*time.Millisecond, "the request was given up before its timeout")
	case <-time.After(time.Minute):
		t.Fatal("the held request was never given up")
	}
	cancel()
	<-flushed
}

// TestSinkPartialWriteCountsOnlyTheRefusedPoints: InfluxDB writes the
// good points of a batch and refuses the others (a field type conflict)
// with a 400 "partial write: ... dropped=N". The sink counted the whole
// batch as rejected (Stats.Rejected 4, Stats.Points 0 though 3 points were
// written) and its error did not say that any were written. It counts
// the server's dropped points as rejected and the others as written, and
// the WriteError says how many of the batch the server dropped.
func TestSinkPartialWriteCountsOnlyTheRefusedPoints(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	var mu sync.Mutex
	var rejErr *influx.WriteError
	var rejected []string
	s := newSink(t, srv.URL, "tflo/autogen", influx.WithBatchSize(100), influx.WithOnReject(func(err *influx.WriteError, lines []byte) {
		mu.Lock()
		defer mu.Unlock()
		rejErr = err
		rejected = append(rejected, string(lines))
	}))
	ctx := context.Background()
	m := measurement("partial")
	require.NoError(t, s.Write(ctx, genPoints(m, 0, 1)...)) // value is a float from now on
	require.NoError(t, s.Flush(ctx))
	bad := influx.Point{Measurement: m, Sensor: "s00", Mode: "0", TS: baseTS + 1, Fields: []influx.Field{{Key: "value", Value: streaming.Int(5)}}}
	require.NoError(t, s.Write(ctx, genPoints(m, 2, 3)...))
	require.NoError(t, s.Write(ctx, bad))
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, 4, srv.Count(t, "tflo", m))
	st := s.Stats()
	require.Equal(t, int64(1), st.Rejected, "only the refused point is rejected")
	require.Equal(t, int64(4), st.Points, "the points the server wrote are counted written")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, rejected, 1)
	require.ErrorIs(t, rejErr, influx.ErrRejected)
	require.Equal(t, 4, rejErr.Points)
	require.Equal(t, 1, rejErr.Dropped)
	require.Contains(t, rejErr.Error(), "partial write")
	require.Contains(t, rejErr.Error(), "1 of the 4 points dropped, the others written")
}

// TestSinkOtherClientErrorsFailAtOnce: a 4xx naming no bad data,
// credentials or bucket (a proxy in front answering 405, a 415) was
// retried for ever like a 5xx, though the docs retry only 5xx, 408, 429
// and transport errors: every retry gets the same answer. The sink fails
// at once with ErrRefused, naming the status; 408 is still retried.
func TestSinkOtherClientErrorsFailAtOnce(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	for _, code := range []int{http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType} {
		fp := &faultProxy{faults: []int{code, code, code, code, code}}
		proxy := httptest.NewServer(fp.handler(srv.URL))
		s := newSink(t, proxy.URL, "tflo/autogen", influx.WithRetryBackoff(time.Millisecond, 2*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, s.Write(ctx, genPoints(measurement("refused"), 0, 3)...))
		err := s.Flush(ctx)
		require.ErrorIs(t, err, influx.ErrRefused, "HTTP %d", code)
		require.ErrorIs(t, err, streaming.ErrSinkFailed)
		require.Contains(t, err.Error(), fmt.Sprint(code))
		require.Equal(t, int64(1), fp.writes.Load(), "HTTP %d is not retried", code)
		require.Zero(t, s.Stats().Retries)
		cancel()
		proxy.Close()
	}

	// 408 is retried, and the batch lands.
	fp := &faultProxy{faults: []int{http.StatusRequestTimeout}}
	proxy := httptest.NewServer(fp.handler(srv.URL))
	t.Cleanup(proxy.Close)
	s := newSink(t, proxy.URL, "tflo/autogen", influx.WithRetryBackoff(time.Millisecond, 2*time.Millisecond))
	m := measurement("timeout")
	require.NoError(t, s.Write(context.Background(), genPoints(m, 0, 3)...))
	require.NoError(t, s.Flush(context.Background()))
	require.Equal(t, int64(1), s.Stats().Retries)
	require.Equal(t, int64(2), fp.writes.Load())
}
