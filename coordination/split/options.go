package split

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/metered"
)

// Handler runs one tenancy of a split. It is started on its own goroutine
// when the worker gains the split and must return when ctx ends (the
// tenancy is over: self-fence, lost lease, fenced commit, forced
// revocation, worker shutdown). When t.Revoking() closes it should stop
// intake, Commit the tail and return. Returning nil releases the split
// gracefully (the next owner consumes no attempt); returning an error
// releases it as a failed tenancy (one attempt consumed).
type Handler func(ctx context.Context, t *Tenancy) error

type config struct {
	clock        coordination.Clock
	handler      Handler
	capacity     uint64
	maxAttempts  uint32
	drain        time.Duration
	reconcile    time.Duration
	retry        time.Duration
	metrics      *Metrics
	storeMetrics *metered.Metrics
	log          *slog.Logger
	instance     string
}

func defaultConfig(ttl time.Duration) config {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return config{
		clock:       coordination.SystemClock{},
		maxAttempts: 3,
		drain:       ttl,
		reconcile:   ttl,
		retry:       ttl / 6,
		log:         slog.New(slog.DiscardHandler),
		instance:    hex.EncodeToString(b[:]),
	}
}

func (c config) validate(id WorkerID) error {
	switch {
	case !coordination.ValidKey(string(id)) || len(id) > maxWorkerIDLen:
		return fmt.Errorf("split: worker id %s must be dot-separated tokens of [A-Za-z0-9_=-], at most %d bytes", coordination.QuoteKey(string(id)), maxWorkerIDLen)
	case c.clock == nil:
		return fmt.Errorf("split: worker %q: the clock must not be nil", id)
	case c.handler == nil:
		return fmt.Errorf("split: worker %q: a Handler is required (WithHandler)", id)
	case c.maxAttempts == 0:
		return fmt.Errorf("split: worker %q: max attempts must be at least 1", id)
	case c.drain <= 0:
		return fmt.Errorf("split: worker %q: drain deadline must be positive, got %v", id, c.drain)
	case c.reconcile <= 0:
		return fmt.Errorf("split: worker %q: reconcile interval must be positive, got %v", id, c.reconcile)
	case c.retry <= 0:
		return fmt.Errorf("split: worker %q: retry interval must be positive, got %v", id, c.retry)
	case c.instance == "":
		return fmt.Errorf("split: worker %q: instance must not be empty", id)
	}
	return nil
}

// Option configures NewWorker.
type Option func(*config)

// WithHandler sets the function that runs each tenancy. Required.
func WithHandler(h Handler) Option { return func(c *config) { c.handler = h } }

// WithClock sets the clock of renewals, self-fence and drain timers.
// Default: the wall clock. Must be the store's clock in virtual-time tests.
func WithClock(clk coordination.Clock) Option { return func(c *config) { c.clock = clk } }

// WithCapacity bounds the total weight this worker accepts. Default: 0,
// unbounded.
func WithCapacity(weight uint64) Option { return func(c *config) { c.capacity = weight } }

// WithMaxAttempts sets N: a split whose last N tenancies all failed without
// committing progress is quarantined at the next claim. Default: 3.
func WithMaxAttempts(n uint32) Option { return func(c *config) { c.maxAttempts = n } }

// WithDrainDeadline bounds a cooperative revocation: a handler that has not
// returned this long after Revoking closed is cancelled and the split is
// released anyway. Default: the lease TTL.
func WithDrainDeadline(d time.Duration) Option { return func(c *config) { c.drain = d } }

// WithReconcileInterval sets how often the worker re-lists both keyspaces
// (the backstop for missed watch events) and re-evaluates its duties.
// Default: the lease TTL.
func WithReconcileInterval(d time.Duration) Option { return func(c *config) { c.reconcile = d } }

// WithRetryInterval sets the back-off between failed store calls
// (registration, re-watch). Default: a sixth of the lease TTL.
func WithRetryInterval(d time.Duration) Option { return func(c *config) { c.retry = d } }

// WithMetrics sets the Prometheus collectors. Default: an unregistered set.
func WithMetrics(m *Metrics) Option { return func(c *config) { c.metrics = m } }

// WithStoreMetrics wraps the store with coordination/metered: every store
// call gets a deadline of a third of the lease TTL (a timeout is Retryable)
// and its duration goes to m's histogram. Default: the store is used as
// given.
func WithStoreMetrics(m *metered.Metrics) Option { return func(c *config) { c.storeMetrics = m } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithInstance sets the identity of this process incarnation (twin
// detection compares it). Default: 16 random hex digits.
func WithInstance(s string) Option { return func(c *config) { c.instance = s } }
