package vclock

import (
	"sort"
	"sync"
	"time"

	"github.com/tflo-io/tflo/coordination"
)

// Clock is a manually advanced clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[*timer]struct{}
}

var _ coordination.Clock = (*Clock)(nil)

// New returns a clock standing at start.
func New(start time.Time) *Clock {
	return &Clock{now: start, timers: map[*timer]struct{}{}}
}

// Now returns the current virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Pending returns how many timers are armed (for tests that wait until
// every goroutine has parked on the clock).
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves time forward by d, firing due timers in deadline order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		var due []*timer
		for t := range c.timers {
			if !t.at.After(end) {
				due = append(due, t)
			}
		}
		if len(due) == 0 {
			break
		}
		sort.Slice(due, func(i, j int) bool {
			if due[i].at.Equal(due[j].at) {
				return due[i].seq < due[j].seq
			}
			return due[i].at.Before(due[j].at)
		})
		t := due[0]
		delete(c.timers, t)
		if t.at.After(c.now) {
			c.now = t.at
		}
		// Under the lock (fire never blocks): a Stop or Reset that
		// returns before the send would otherwise leave its value in
		// the channel after it, which a time.Timer never does.
		t.fire(c.now)
	}
	if end.After(c.now) {
		c.now = end
	}
	c.mu.Unlock()
}

// NewTimer returns a timer whose channel receives once d has elapsed.
func (c *Clock) NewTimer(d time.Duration) coordination.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f on its own goroutine once d has elapsed.
func (c *Clock) AfterFunc(d time.Duration, f func()) coordination.Timer {
	t := &timer{c: c, f: f}
	t.Reset(d)
	return t
}

type timer struct {
	c   *Clock
	ch  chan time.Time
	f   func()
	at  time.Time
	seq uint64
}

func (t *timer) fire(now time.Time) {
	if t.f != nil {
		go t.f()
		return
	}
	select {
	case t.ch <- now:
	default:
	}
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop disarms t and, as time.Timer's Stop does since Go 1.23, drops a
// fire time not yet received: no receive from C after Stop returns gets a
// stale value. A dropped value counts as stopped in time (true), as there.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	delete(t.c.timers, t)
	return t.drain() || armed
}

// drain drops an unreceived fire time, reporting whether there was one;
// called with t.c.mu held.
func (t *timer) drain() bool {
	select {
	case <-t.ch: // a nil channel (AfterFunc) is never ready
		return true
	default:
		return false
	}
}

func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	return t.arm(t.c.now.Add(d))
}

// ResetAt arms the timer for an absolute deadline, read against the clock
// under its lock, so no time can pass between computing and arming.
func (t *timer) ResetAt(deadline time.Time) bool {
	t.c.mu.Lock()
	return t.arm(deadline)
}

// arm is called with t.c.mu held and releases it. Like time.Timer's
// Reset since Go 1.23 it drops a fire time not yet received, so C then
// delivers only the new deadline.
func (t *timer) arm(at time.Time) bool {
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	armed = t.drain() || armed
	t.at = at
	t.c.seq++
	t.seq = t.c.seq
	if !at.After(t.c.now) {
		delete(t.c.timers, t)
		t.fire(t.c.now)
		return armed
	}
	t.c.timers[t] = struct{}{}
	return armed
}
