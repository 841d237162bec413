package ops

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// RollingMin is the minimum of the last N values; [RollingMax] is its
// mirror. Both keep a monotonic deque (values that can still become the
// extreme, in arrival order), so an update costs O(1) amortised and the
// deque never holds more than N entries.
//
// Warm-up: by default ([streaming.WarmupFull]) no output until N values
// have been seen; from the N-th value on, every valid input emits
// Float(min of the last N). With WithWarmup(streaming.WarmupPartial) the
// first values emit the minimum of the values seen so far; the policy is
// not state, a blob loads into a node of either.
//
// NaN and ±Inf inputs are refused: state unchanged (they do not count
// toward the window), Eval returns streaming.Rejected(). Any finite value
// is taken: the deque only compares values.
//
// State (TypeVersion 1): window | values seen | deque length | deque
// entries (sequence number, value), front first.
type RollingMin struct{ rolling }

// RollingMax is the maximum of the last N values; see [RollingMin] for
// cost, warm-up, NaN/Inf handling and state.
type RollingMax struct{ rolling }

var (
	_ streaming.Operator = (*RollingMin)(nil)
	_ streaming.Arity    = (*RollingMin)(nil)
	_ streaming.Operator = (*RollingMax)(nil)
	_ streaming.Arity    = (*RollingMax)(nil)
)

// NewRollingMin returns a RollingMin over the last n values. It panics if
// n < 1 or n > 2^24.
func NewRollingMin(n int) *RollingMin { return &RollingMin{newRolling("ops.NewRollingMin", n, false)} }

// NewRollingMax returns a RollingMax over the last n values. It panics if
// n < 1 or n > 2^24.
func NewRollingMax(n int) *RollingMax { return &RollingMax{newRolling("ops.NewRollingMax", n, true)} }

// Name returns "rolling_min".
func (*RollingMin) Name() string { return "rolling_min" }

// Name returns "rolling_max".
func (*RollingMax) Name() string { return "rolling_max" }

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns r. Call it before the first Eval, in the node's factory.
func (r *RollingMin) WithWarmup(w streaming.Warmup) *RollingMin {
	r.partial = w == streaming.WarmupPartial
	return r
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns r. Call it before the first Eval, in the node's factory.
func (r *RollingMax) WithWarmup(w streaming.Warmup) *RollingMax {
	r.partial = w == streaming.WarmupPartial
	return r
}

// Load reads a blob made by Save; it refuses one saved with another window.
func (r *RollingMin) Load(data []byte) error { return r.load("rolling_min", data) }

// Load reads a blob made by Save; it refuses one saved with another window.
func (r *RollingMax) Load(data []byte) error { return r.load("rolling_max", data) }

// rolling is the shared monotonic deque. seqs and vals form a ring of
// capacity n; front is the index of the oldest entry.
type rolling struct {
	streaming.Base
	max   bool
	n     int
	seen  uint64 // valid values seen; the next value's sequence number
	seqs  []uint64
	vals  []float64
	front int
	size  int
	// partial: emit the extreme of the values seen while the window fills.
	partial bool
}

func newRolling(who string, n int, max bool) rolling {
	if n < 1 || n > smaMaxWindow {
		panic(fmt.Sprintf("%s: window %d is outside 1..%d", who, n, smaMaxWindow))
	}
	return rolling{max: max, n: n, seqs: make([]uint64, n), vals: make([]float64, n)}
}

// TypeVersion returns 1.
func (*rolling) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*rolling) Arity() (int, int) { return 1, 1 }

// Window returns N.
func (r *rolling) Window() int { return r.n }

// Reset empties the window.
func (r *rolling) Reset() { r.seen, r.front, r.size = 0, 0, 0 }

// dominated reports whether a queued value v can never again be the
// extreme once x has arrived.
func (r *rolling) dominated(v, x float64) bool {
	if r.max {
		return v <= x
	}
	return v >= x
}

// Eval pushes in[0] and emits the window's extreme once the window is full.
func (r *rolling) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !finiteIn(x) {
		return streaming.Rejected()
	}
	seq := r.seen
	r.seen++
	// Drop from the back every value x dominates.
	for r.size > 0 {
		back := r.front + r.size - 1
		if back >= r.n {
			back -= r.n
		}
		if !r.dominated(r.vals[back], x) {
			break
		}
		r.size--
	}
	// Drop from the front the value that left the window. After the
	// back pops at most one entry can be out of the window.
	if r.size > 0 && r.seqs[r.front]+uint64(r.n) <= seq {
		r.front++
		if r.front == r.n {
			r.front = 0
		}
		r.size--
	}
	at := r.front + r.size
	if at >= r.n {
		at -= r.n
	}
	r.seqs[at], r.vals[at] = seq, x
	r.size++
	if r.seen < uint64(r.n) && !r.partial {
		return streaming.NoOutput()
	}
	return streaming.Float(r.vals[r.front])
}

// Save writes: window | seen | size | size × (seq, value), front first.
func (r *rolling) Save() ([]byte, error) {
	dst := make([]byte, 0, 16+r.size*18)
	dst = putU(dst, uint64(r.n))
	dst = putU(dst, r.seen)
	dst = putU(dst, uint64(r.size))
	for i := range r.size {
		j := (r.front + i) % r.n
		dst = putU(dst, r.seqs[j])
		dst = putF(dst, r.vals[j])
	}
	return dst, nil
}

// load checks the deque's invariants (sequence numbers increasing and
// inside the window, values strictly monotonic) so a corrupt blob is
// refused instead of yielding wrong extremes.
func (r *rolling) load(name string, data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("window", smaMaxWindow)
	if d.Err == nil && n != r.n {
		return mismatch(name, "window", n, r.n)
	}
	seen := d.U()
	size := d.Count("deque length", uint64(n))
	seqs := make([]uint64, size)
	vals := make([]float64, size)
	for i := range size {
		seqs[i], vals[i] = d.U(), d.Finite("deque value")
		if d.Err != nil {
			break
		}
		switch {
		case seqs[i] >= seen || seqs[i]+uint64(n) < seen:
			d.Fail("deque entry %d has sequence %d outside the window ending at %d", i, seqs[i], seen)
		case i > 0 && seqs[i] <= seqs[i-1]:
			d.Fail("deque sequence numbers not increasing at entry %d", i)
		case i > 0 && r.dominated(vals[i-1], vals[i]):
			d.Fail("deque values not monotonic at entry %d", i)
		}
	}
	if d.Err == nil && seen > 0 && (size == 0 || seqs[size-1] != seen-1) {
		d.Fail("deque does not end with the newest value (sequence %d)", seen-1)
	}
	if err := d.Done(name); err != nil {
		return err
	}
	r.Reset()
	r.seen, r.size = seen, size
	copy(r.seqs, seqs)
	copy(r.vals, vals)
	return nil
}
