package metered_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/metered"
	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/testsuite/coordtest"
)

func TestConformance(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		clk := vclock.New(time.Unix(0, 0))
		inner, err := memstore.New(memstore.WithClock(clk))
		require.NoError(t, err)
		s, err := metered.New(inner, metered.WithTimeout(5*time.Second))
		require.NoError(t, err)
		return coordtest.Harness{Store: s, Advance: clk.Advance, BreakWatches: inner.BreakWatches}
	})
}

// stuckStore never answers until its context ends, ignoring it for Get.
type stuckStore struct {
	coordination.Store
	release chan struct{}
}

func (s stuckStore) Get(ctx context.Context, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	<-s.release // ignores ctx, like a backend stuck in a syscall
	return coordination.Entry{}, coordination.NotFound(ks, key)
}

func TestTimeoutIsRetryableAndMetered(t *testing.T) {
	inner, err := memstore.New()
	require.NoError(t, err)
	stuck := stuckStore{Store: inner, release: make(chan struct{})}
	defer close(stuck.release)
	reg := prometheus.NewRegistry()
	m := metered.NewMetrics(reg)
	s, err := metered.New(stuck, metered.WithTimeout(20*time.Millisecond), metered.WithMetrics(m))
	require.NoError(t, err)

	_, err = s.Get(context.Background(), coordination.Durable, "k")
	require.ErrorIs(t, err, metered.ErrTimeout)
	require.True(t, coordination.IsRetryable(err), "a timeout is Retryable: %v", err)

	o, err := s.Create(context.Background(), coordination.Durable, "k", []byte("v"))
	require.NoError(t, err)
	require.True(t, o.Won())
	_, err = s.Create(context.Background(), coordination.Durable, "k", []byte("v"))
	require.NoError(t, err)

	require.Equal(t, 3, testutil.CollectAndCount(m.Duration()), "series: get/retryable, create/won, create/lost")
	n, err := testutil.GatherAndCount(reg, "tflo_coordination_store_op_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 3, n)
}

func TestNewValidates(t *testing.T) {
	_, err := metered.New(nil)
	require.Error(t, err)
	inner, err := memstore.New()
	require.NoError(t, err)
	_, err = metered.New(inner, metered.WithTimeout(-1))
	require.Error(t, err)
}

// TestCallerDeadlineIsNotReportedAsTimeout: a call cut off by the caller's
// own, shorter deadline is Retryable with the caller's error; it was
// reported as the wrapper's per-operation timeout "after" a duration that
// never passed.
func TestCallerDeadlineIsNotReportedAsTimeout(t *testing.T) {
	inner, err := memstore.New()
	require.NoError(t, err)
	stuck := stuckStore{Store: inner, release: make(chan struct{})}
	defer close(stuck.release)
	s, err := metered.New(stuck, metered.WithTimeout(time.Hour))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = s.Get(ctx, coordination.Durable, "k")
	require.True(t, coordination.IsRetryable(err), "%v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, metered.ErrTimeout)
	require.NotContains(t, err.Error(), "1h0m0s")
}

// stuckWatch never establishes a watch until released, ignoring its
// context, like a backend whose server does not answer.
type stuckWatch struct {
	coordination.Store
	release chan struct{}
}

func (s stuckWatch) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	<-s.release
	return s.Store.Watch(ctx, ks, prefix)
}

// ctxWatch records the context each Watch is started with.
type ctxWatch struct {
	coordination.Store
	ctx chan context.Context
}

func (s ctxWatch) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	s.ctx <- ctx
	return s.Store.Watch(ctx, ks, prefix)
}

// TestWatchEstablishingHasTheDeadline: the package documents that the
// per-operation deadline bounds establishing a watch, but Watch ran
// without one and waited for a stuck store for ever. The watch itself
// must still live on the caller's context, not on the deadline.
func TestWatchEstablishingHasTheDeadline(t *testing.T) {
	inner, err := memstore.New()
	require.NoError(t, err)
	stuck := stuckWatch{Store: inner, release: make(chan struct{})}
	defer close(stuck.release)
	s, err := metered.New(stuck, metered.WithTimeout(20*time.Millisecond))
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		w, err := s.Watch(context.Background(), coordination.Durable, "")
		if w != nil {
			_ = w.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, metered.ErrTimeout)
		require.True(t, coordination.IsRetryable(err), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Watch of a stuck store outlived its 20ms deadline by 5s")
	}

	rec := ctxWatch{Store: inner, ctx: make(chan context.Context, 1)}
	s, err = metered.New(rec, metered.WithTimeout(time.Hour))
	require.NoError(t, err)
	w, err := s.Watch(context.Background(), coordination.Durable, "")
	require.NoError(t, err)
	wctx := <-rec.ctx
	_, has := wctx.Deadline()
	require.False(t, has, "the watch lives on the caller's context, not on the per-operation deadline")
	require.NoError(t, w.Close())
	require.Error(t, wctx.Err(), "Close releases the watch's context")
}

// TestTimedOutOperationLandsInAFiniteBucket: the histogram's buckets
// stopped at about 6.55 s while the default per-operation timeout is a
// third of the lease TTL, which has no maximum: with a 30 s TTL every
// operation cut off at its 10 s deadline (and every slow one) was counted
// only in +Inf, so no quantile could tell how slow the store was.
func TestTimedOutOperationLandsInAFiniteBucket(t *testing.T) {
	for _, ttl := range []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 20 * time.Minute} {
		inner, err := memstore.New(memstore.WithLeaseTTL(ttl))
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		m := metered.NewMetrics(reg)
		_, err = metered.New(inner, metered.WithMetrics(m))
		require.NoError(t, err)
		// A call cut off at its deadline is measured a moment after it.
		timeout := ttl / 3
		m.Duration().WithLabelValues("get", "durable", "retryable").Observe((timeout + timeout/100).Seconds())
		families, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, families, 1)
		h := families[0].GetMetric()[0].GetHistogram()
		buckets := h.GetBucket()
		top := buckets[len(buckets)-1]
		require.EqualValues(t, 1, top.GetCumulativeCount(),
			"lease TTL %v: an operation cut off at its %v deadline is counted below the top bucket (%gs), not only in +Inf", ttl, timeout, top.GetUpperBound())
	}
}
