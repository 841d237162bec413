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
// stalls on a broker's full in-flight window (Mosquitto's 20, or 1 for
// in-order delivery) recovers within one long lull of the old rule (any
// lull with a message pending): the first stall shows the window, the
// next are caught at their first tick. A stream whose lulls are its own
// (one message every other tick; the demo's 20 sensors published at
// once every other tick) no longer checkpoints at every lull.
func TestStallDetector(t *testing.T) {
	const rm = 4096
	newDue := func() func(uint64, int) bool { return newStallDetector(rm).due }

	for _, window := range []int{1, 5, 10, 20, 100, 4096} {
		oldTicks, oldCP := simulate(oldStallDue(rm), 5000, window, 1000, 1)
		newTicks, newCP := simulate(newDue(), 5000, window, 1000, 1)
		assert.LessOrEqual(t, newTicks, oldTicks+longLullTicks, "window %d: ticks to drain", window)
		assert.Equal(t, oldCP, newCP, "window %d: checkpoints", window)
		// A producer slower than the window fills per tick.
		oldTicks, _ = simulate(oldStallDue(rm), 2000, window, 7, 1)
		newTicks, _ = simulate(newDue(), 2000, window, 7, 1)
		assert.LessOrEqual(t, newTicks, oldTicks+longLullTicks, "window %d, 7 a tick: ticks to drain", window)
	}

	// Sparse: one message every other tick, window 4096: one checkpoint,
	// at the long lull after the last message.
	_, oldCP := simulate(oldStallDue(rm), 200, rm, 1, 2)
	_, newCP := simulate(newDue(), 200, rm, 1, 2)
	assert.Equal(t, 200, oldCP, "the old rule checkpointed at every lull")
	assert.Equal(t, 1, newCP, "sparse stream")

	// The demo: 20 sensors published at once every 100 ms (every other
	// tick) to a broker without flow control (65535 in flight). Taking
	// each lull with 20 pending for a full window checkpointed 10 times
	// a second; half the Receive Maximum (2048 pending) is the first
	// stall checkpoint now.
	ticks, bursts := simulate(newDue(), 2000, 65535, 20, 2)
	assert.Equal(t, 1, bursts, "bursts of 20 every other tick, 2000 readings in %d ticks", ticks)
	_, bursts = simulate(newDue(), 20*1000, 65535, 20, 2)
	assert.LessOrEqual(t, bursts, 20*1000/(rm/2)+1, "bursts of 20 every other tick, 20000 readings")

	// A learned window is forgotten once more is pending.
	d := newStallDetector(rm)
	assert.False(t, d.due(3, 3))
	for range longLullTicks - 1 {
		assert.False(t, d.due(3, 3))
	}
	assert.True(t, d.due(3, 3), "a long lull is a stall")
	assert.Equal(t, 3, d.window)
	assert.False(t, d.due(3, 0))
	assert.True(t, d.due(3, 3), "then a lull at the window is")
	assert.False(t, d.due(4, 4))
	assert.Equal(t, 0, d.window)
	assert.False(t, d.due(4, 4), "a lull with more pending than the window was is no stall at once")
}
