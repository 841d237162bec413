package metered

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/coordination"
)

// ErrTimeout is the cause of the Retryable error a call gets when its
// per-operation deadline passes.
var ErrTimeout = errors.New("coordination store operation timed out")

// Metrics holds the collectors; create it once per registry.
type Metrics struct {
	duration *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered). The buckets run from 50µs to about 419 s: the default
// per-operation timeout is a third of the lease TTL, and an operation cut
// off at it still lands in a finite bucket for lease TTLs up to 20
// minutes, rather than only in +Inf where no quantile can see it.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tflo", Subsystem: "coordination", Name: "store_op_duration_seconds",
		Help:    "Duration of coordination store operations by operation, keyspace and result.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 24),
	}, []string{"op", "keyspace", "result"})}
	if reg != nil {
		reg.MustRegister(m.duration)
	}
	return m
}

// Duration exposes the histogram (for tests and custom exposition).
func (m *Metrics) Duration() *prometheus.HistogramVec { return m.duration }

type config struct {
	timeout time.Duration
	metrics *Metrics
}

// Option configures New.
type Option func(*config)

// WithTimeout sets the per-operation deadline. Default: a third of the
// store's lease TTL, so one stuck call can never outlast a renewal period.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithMetrics sets the collectors. Default: a private, unregistered set.
func WithMetrics(m *Metrics) Option { return func(c *config) { c.metrics = m } }

// Store is the metering wrapper.
type Store struct {
	inner coordination.Store
	cfg   config
}

var _ coordination.Store = (*Store)(nil)

// New wraps inner.
func New(inner coordination.Store, opts ...Option) (*Store, error) {
	if inner == nil {
		return nil, errors.New("metered: the inner store must not be nil")
	}
	cfg := config{timeout: inner.LeaseTTL() / 3}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("metered: per-operation timeout must be positive, got %v", cfg.timeout)
	}
	if cfg.metrics == nil {
		cfg.metrics = NewMetrics(nil)
	}
	return &Store{inner: inner, cfg: cfg}, nil
}

// LeaseTTL returns the inner store's TTL.
func (s *Store) LeaseTTL() time.Duration { return s.inner.LeaseTTL() }

func result(o coordination.CasOutcome, err error) string {
	switch {
	case err == nil && o.Won():
		return "won"
	case err == nil:
		return "lost"
	}
	return errResult(err)
}

func errResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, coordination.ErrNotFound):
		return "not_found"
	case coordination.IsFatal(err):
		return "fatal"
	}
	return "retryable"
}

// testHookBeforeSelect, when set, runs in call between starting the
// operation and waiting for it, with the deadline's channel and whether
// the operation has answered.
var testHookBeforeSelect func(done <-chan struct{}, answered func() bool)

// call runs fn under the deadline; a late call becomes Retryable.
func call[T any](s *Store, ctx context.Context, op string, ks coordination.Keyspace, key string,
	fn func(context.Context) (T, error), label func(T, error) string) (T, error) {
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	// Only the wrapper's own deadline is ErrTimeout: a caller's shorter
	// deadline or cancellation is reported as the caller's error.
	ownDeadline := func() bool { return parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) }
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := fn(ctx)
		ch <- res{v, err}
	}()
	if testHookBeforeSelect != nil {
		testHookBeforeSelect(ctx.Done(), func() bool { return len(ch) > 0 })
	}
	var r res
	answered := true
	select {
	case r = <-ch:
	case <-ctx.Done():
		// A select picks at random among ready cases: a call that finished
		// as the deadline passed has an answer (a won CAS, say) that must
		// not be reported as a timeout, or the caller retries a write that
		// landed.
		select {
		case r = <-ch:
		default:
			answered = false
		}
	}
	switch {
	case answered:
		// An error the deadline may have caused is a timeout; a fatal
		// error or a not-found is the store's answer and stays one.
		if r.err != nil && ownDeadline() && !coordination.IsFatal(r.err) && !errors.Is(r.err, coordination.ErrNotFound) {
			r.err = coordination.Retryable(op, ks, key, fmt.Errorf("%w after %v: %w", ErrTimeout, s.cfg.timeout, r.err))
		}
	case ownDeadline():
		r.err = coordination.Retryable(op, ks, key, fmt.Errorf("%w after %v", ErrTimeout, s.cfg.timeout))
	default:
		r.err = coordination.Retryable(op, ks, key, parent.Err())
	}
	s.cfg.metrics.duration.WithLabelValues(op, ks.String(), label(r.v, r.err)).Observe(time.Since(start).Seconds())
	return r.v, r.err
}

// Create meters inner.Create.
func (s *Store) Create(ctx context.Context, ks coordination.Keyspace, key string, value []byte) (coordination.CasOutcome, error) {
	return call(s, ctx, "create", ks, key, func(c context.Context) (coordination.CasOutcome, error) {
		return s.inner.Create(c, ks, key, value)
	}, result)
}

// Update meters inner.Update.
func (s *Store) Update(ctx context.Context, ks coordination.Keyspace, key string, value []byte, expected coordination.Revision) (coordination.CasOutcome, error) {
	return call(s, ctx, "update", ks, key, func(c context.Context) (coordination.CasOutcome, error) {
		return s.inner.Update(c, ks, key, value, expected)
	}, result)
}

// Get meters inner.Get.
func (s *Store) Get(ctx context.Context, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	return call(s, ctx, "get", ks, key, func(c context.Context) (coordination.Entry, error) {
		return s.inner.Get(c, ks, key)
	}, func(_ coordination.Entry, err error) string { return errResult(err) })
}

// Delete meters inner.Delete.
func (s *Store) Delete(ctx context.Context, ks coordination.Keyspace, key string, expected coordination.Revision) (coordination.CasOutcome, error) {
	return call(s, ctx, "delete", ks, key, func(c context.Context) (coordination.CasOutcome, error) {
		return s.inner.Delete(c, ks, key, expected)
	}, result)
}

// List meters inner.List.
func (s *Store) List(ctx context.Context, ks coordination.Keyspace, prefix string) ([]coordination.Entry, error) {
	return call(s, ctx, "list", ks, prefix, func(c context.Context) ([]coordination.Entry, error) {
		return s.inner.List(c, ks, prefix)
	}, func(_ []coordination.Entry, err error) string { return errResult(err) })
}

// Watch meters establishing inner.Watch under the per-operation deadline;
// the watch itself lives on ctx, not on the deadline.
func (s *Store) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	// The watch's own context outlives the call's deadline; cancelling it
	// ends a watch the inner store established too late to be returned.
	wctx, cancel := context.WithCancel(ctx)
	w, err := call(s, ctx, "watch", ks, prefix, func(context.Context) (coordination.Watcher, error) {
		return s.inner.Watch(wctx, ks, prefix)
	}, func(_ coordination.Watcher, err error) string { return errResult(err) })
	if err != nil {
		cancel()
		return nil, err
	}
	return &watcher{Watcher: w, cancel: cancel}, nil
}

// watcher releases the watch's context on Close.
type watcher struct {
	coordination.Watcher
	cancel context.CancelFunc
}

// Close closes the inner watch and releases its context.
func (w *watcher) Close() error {
	err := w.Watcher.Close()
	w.cancel()
	return err
}
