// Package lograte bounds how often a line that can repeat once per record
// is logged. A stream of bad records (a producer with a broken encoder, a
// hostile client) would otherwise write one line per record, and the log
// floods. Counters and the dead-letter destination still see every
// record; the log keeps a sample and says how many lines it left out.
package lograte

import (
	"sync"
	"time"
)

// Default bounds of a Limiter made by New: the first DefaultBurst lines
// of every DefaultInterval.
const (
	DefaultBurst    = 10
	DefaultInterval = 10 * time.Second
)

// Limiter lets through the first burst lines of every interval. Safe for
// concurrent use.
type Limiter struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	start      time.Time // of the current interval
	n          int       // lines let through in it
	suppressed int       // lines left out since the last one let through
}

// New returns a Limiter of DefaultBurst lines per DefaultInterval.
func New() *Limiter { return NewWith(DefaultBurst, DefaultInterval, time.Now) }

// NewWith returns a Limiter of burst lines (at least one) per interval,
// reading the time from now.
func NewWith(burst int, interval time.Duration, now func() time.Time) *Limiter {
	return &Limiter{burst: max(burst, 1), interval: interval, now: now}
}

// Allow reports whether a line may be logged now and, when it may, how
// many lines were left out since the last one let through (log it with
// the line, as "suppressed", when it is not zero). Lines left out at the
// end of a burst of bad records are reported with the next line let
// through; the counters carry the exact totals.
func (l *Limiter) Allow() (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() || now.Sub(l.start) >= l.interval {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// With returns args, plus "suppressed" and the count when lines were left
// out: the arguments of the line Allow let through.
func With(suppressed int, args ...any) []any {
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	return args
}
