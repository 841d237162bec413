package coordination

import "time"

// Clock is the time source of stores and of the split protocol, injectable
// so tests drive expiry and timers on virtual time (package vclock).
// Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends on C once d has elapsed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f on its own goroutine once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable, resettable timer from a Clock.
type Timer interface {
	// C delivers the fire time; nil for AfterFunc timers.
	C() <-chan time.Time
	// Stop prevents the timer from firing; false if it already fired or
	// was stopped.
	Stop() bool
	// Reset re-arms the timer to fire after d.
	Reset(d time.Duration) bool
	// ResetAt re-arms the timer to fire at deadline on its clock
	// (immediately if it has passed). Prefer it to Reset(deadline.Sub(Now()))
	// for deadlines anchored at an earlier instant: computing the duration
	// first lets time pass before the timer is armed, and the deadline
	// drifts late by that much.
	ResetAt(deadline time.Time) bool
}

// SystemClock is the wall clock.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{t: time.NewTimer(d)} }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer {
	return sysTimer{t: time.AfterFunc(d, f)}
}

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time        { return s.t.C }
func (s sysTimer) Stop() bool                 { return s.t.Stop() }
func (s sysTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }
func (s sysTimer) ResetAt(deadline time.Time) bool {
	return s.t.Reset(time.Until(deadline))
}
