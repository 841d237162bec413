package streaming

import (
	"fmt"
	"sync"
	"time"
)

// BreakerState is the state of a [Breaker].
type BreakerState int

// The states of a Breaker.
const (
	// BreakerClosed lets every call through and counts consecutive failures.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses calls until the cool-down has passed.
	BreakerOpen
	// BreakerHalfOpen lets exactly one probe through; its outcome closes or
	// reopens the breaker.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("breaker-state(%d)", int(s))
}

// MarshalText makes the state readable in JSON status results.
func (s BreakerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Breaker is a consecutive-failure circuit breaker with an injectable
// clock.
//
// Closed: Allow succeeds; Failure counts, and the Threshold-th consecutive
// failure opens the breaker. Open: Allow fails with an error wrapping
// ErrBreakerOpen until CoolDown has passed since it opened, then the
// breaker is half-open. Half-open: the first Allow is the probe and
// succeeds; further Allows fail until the probe reports. Success closes the
// breaker and clears the count; Failure reopens it for another cool-down.
// A late Success while open (from a call admitted before the breaker
// opened) is ignored.
// A probe that never reports (its caller vanished) is forgotten after
// ProbeTimeout, and the next Allow becomes the probe.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	threshold    int
	coolDown     time.Duration
	probeTimeout time.Duration
	now          func() time.Time

	mu       sync.Mutex
	state    BreakerState
	failures int
	openedAt time.Time
	probing  bool
	probeAt  time.Time
}

// NewBreaker returns a closed breaker that opens after threshold
// consecutive failures and stays open for coolDown. now is the clock (nil
// means time.Now); probeTimeout bounds how long a half-open probe may stay
// unreported (0 means 2×coolDown; negative is refused).
func NewBreaker(threshold int, coolDown, probeTimeout time.Duration, now func() time.Time) (*Breaker, error) {
	if threshold < 1 {
		return nil, fmt.Errorf("breaker: threshold %d must be at least 1", threshold)
	}
	if coolDown <= 0 {
		return nil, fmt.Errorf("breaker: cool-down %v must be positive", coolDown)
	}
	if probeTimeout < 0 {
		return nil, fmt.Errorf("breaker: probe timeout %v must not be negative (0 for twice the cool-down)", probeTimeout)
	}
	if probeTimeout == 0 {
		probeTimeout = 2 * coolDown
	}
	if now == nil {
		now = time.Now
	}
	return &Breaker{threshold: threshold, coolDown: coolDown, probeTimeout: probeTimeout, now: now}, nil
}

// Allow reports whether a call may proceed. In the half-open state the
// first caller gets the single probe. The error wraps ErrBreakerOpen and
// says when the next probe is allowed.
func (b *Breaker) Allow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.state == BreakerOpen {
		if wait := b.openedAt.Add(b.coolDown).Sub(now); wait > 0 {
			return fmt.Errorf("%w after %d consecutive failures; next probe in %v", ErrBreakerOpen, b.failures, wait)
		}
		b.state = BreakerHalfOpen
		b.probing = false
	}
	if b.state == BreakerHalfOpen {
		if b.probing && now.Sub(b.probeAt) < b.probeTimeout {
			return fmt.Errorf("%w: half-open, a probe has been in flight since %v", ErrBreakerOpen, b.probeAt.Format(time.RFC3339Nano))
		}
		b.probing = true
		b.probeAt = now
	}
	return nil
}

// Success records a successful call: the breaker closes and the count of
// consecutive failures is cleared. An open breaker ignores it: the success
// is a late answer from a call admitted before the breaker opened, which
// says nothing of the calls that failed since; the cool-down runs out and
// a probe decides.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen {
		return
	}
	b.state = BreakerClosed
	b.failures = 0
	b.probing = false
}

// Failure records a failed call. It opens a closed breaker at the
// threshold and reopens a half-open one at once.
func (b *Breaker) Failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	switch b.state {
	case BreakerClosed:
		if b.failures >= b.threshold {
			b.state = BreakerOpen
			b.openedAt = b.now()
		}
	case BreakerHalfOpen:
		b.state = BreakerOpen
		b.openedAt = b.now()
		b.probing = false
	case BreakerOpen:
		// A late failure from a call admitted before the breaker opened:
		// counted, but it does not extend the cool-down.
	}
}

// State returns the current state. An open breaker whose cool-down has
// passed reports half-open.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && !b.now().Before(b.openedAt.Add(b.coolDown)) {
		return BreakerHalfOpen
	}
	return b.state
}

// ConsecutiveFailures returns the number of failures since the last
// success.
func (b *Breaker) ConsecutiveFailures() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures
}
