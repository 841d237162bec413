package pipeline

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// oldStallDue is the rule checkpointOnStall had: any lull with a message
// pending, or half the Receive Maximum pending.
func oldStallDue(receiveMaximum int) func(received uint64, pending int) bool {
	var last uint64
	return func(received uint64, pending int) bool {
		stalled := pending > 0 && received == last
		last = received
		return stalled || pending >= receiveMaximum/2
	}
}

// simulate runs a broker holding backlog messages for a client with an
// in-flight window of window, one tick at a time: each tick the broker
// sends up to arrive messages while the window has room (a burst: the
// window's worth when arrive is large), then the detector looks, and a
// checkpoint it asks for acknowledges every pending message. It returns
// the ticks until the backlog is delivered and the checkpoints taken.
func simulate(due func(received uint64, pending int) bool, backlog, window, arrive, every int) (ticks, checkpoints int) {
	var received uint64
	pending, sent := 0, 0
	for ticks = 1; sent < backlog || pending > 0; ticks++ {
		if ticks > 1_000_000 {
			panic("no progress")
		}
		if every <= 1 || ticks%every == 0 {
			n := min(arrive, window-pending, backlog-sent)
			sent += n
			pending += n
			received += uint64(n)
		}
		if due(received, pending) {
			checkpoints++
			pending = 0
		}
		if sent == backlog && pending == 0 {
			break
		}
	}
	return ticks, checkpoints
}

// TestStallDetector is the heuristic of checkpointOnStall. A stream that
// stalls on a broker's full in-flight window (Mosquitto's 20) recovers
// at the same ticks as with the old rule (any lull with a message
// pending); a sparse stream (one message every other tick, a window
// much larger) no longer checkpoints on every lull; a broker with a tiny
// window (max_inflight_messages 1) is caught after one long lull, then
// at the first tick of each stall.
func TestStallDetector(t *testing.T) {
	const rm = 4096
	newDue := func() func(uint64, int) bool { return newStallDetector(rm).due }

	for _, window := range []int{10, 20, 100, 4096} {
		oldTicks, oldCP := simulate(oldStallDue(rm), 5000, window, 1000, 1)
		newTicks, newCP := simulate(newDue(), 5000, window, 1000, 1)
		assert.Equal(t, oldTicks, newTicks, "window %d: ticks to drain", window)
		assert.Equal(t, oldCP, newCP, "window %d: checkpoints", window)
		// A producer slower than the window fills per tick.
		oldTicks, _ = simulate(oldStallDue(rm), 2000, window, 7, 1)
		newTicks, _ = simulate(newDue(), 2000, window, 7, 1)
		assert.Equal(t, oldTicks, newTicks, "window %d, 7 a tick: ticks to drain", window)
	}

	// Sparse: one message every other tick, window 4096.
	_, oldCP := simulate(oldStallDue(rm), 200, rm, 1, 2)
	_, newCP := simulate(newDue(), 200, rm, 1, 2)
	assert.Equal(t, 200, oldCP, "the old rule checkpointed at every lull")
	assert.LessOrEqual(t, newCP, 200/stallWindow+1)

	// A window of 1 or 5: one long lull learns it, then every stall is
	// caught at its first tick.
	for _, window := range []int{1, 5} {
		oldTicks, _ := simulate(oldStallDue(rm), 500, window, 1000, 1)
		newTicks, _ := simulate(newDue(), 500, window, 1000, 1)
		assert.LessOrEqual(t, newTicks, oldTicks+longLullTicks, "window %d", window)
	}

	// A learned small window is forgotten once more is pending.
	d := newStallDetector(rm)
	assert.False(t, d.due(3, 3))
	for range longLullTicks - 1 {
		assert.False(t, d.due(3, 3))
	}
	assert.True(t, d.due(3, 3), "a long lull is a stall")
	assert.Equal(t, 3, d.window)
	assert.False(t, d.due(3, 0))
	assert.True(t, d.due(3, 3), "then a lull at the window is")
	d.due(4, 4)
	assert.Equal(t, stallWindow, d.window)
}
