package memstore

import (
	"fmt"
	"time"

	"github.com/tflo-io/tflo/coordination"
)

type config struct {
	clock      coordination.Clock
	ttl        time.Duration
	maxBacklog int
}

func defaultConfig() config {
	return config{clock: coordination.SystemClock{}, ttl: 10 * time.Second}
}

func (c config) validate() error {
	if c.clock == nil {
		return fmt.Errorf("memstore: the clock must not be nil")
	}
	if c.ttl <= 0 {
		return fmt.Errorf("memstore: lease TTL must be positive, got %v", c.ttl)
	}
	if c.maxBacklog < 0 {
		return fmt.Errorf("memstore: max watch backlog must be zero (unbounded) or positive, got %d", c.maxBacklog)
	}
	return nil
}

// Option configures a Store.
type Option func(*config)

// WithClock sets the clock that measures ephemeral expiry. Default: the
// wall clock.
func WithClock(c coordination.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithLeaseTTL sets the TTL every ephemeral write re-arms. Default: 10s.
func WithLeaseTTL(d time.Duration) Option { return func(cfg *config) { cfg.ttl = d } }

// WithMaxWatchBacklog bounds how many live events a watcher may have queued
// (the snapshot it has not read yet does not count); a consumer that falls
// further behind has its watch broken with a Retryable error (it re-watches
// and resynchronises from the snapshot). Default: 0, unbounded.
func WithMaxWatchBacklog(n int) Option { return func(cfg *config) { cfg.maxBacklog = n } }
