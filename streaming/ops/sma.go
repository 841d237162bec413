package ops

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// SMA is the simple moving average of the last N values (a count-based
// window).
//
// Cost: O(1) per event. The window is a ring buffer and the average comes
// from a running sum with Neumaier compensation, so the sum does not drift
// however long the stream runs; when a value leaving the window outweighs
// what stays by 2^20, the window is summed afresh, so no rounding residue
// of it stays behind (O(N) then, at most once per such value).
//
// Warm-up: by default ([streaming.WarmupFull]) no output until N values
// have been seen; from the N-th value on, every valid input emits
// Float(mean of the last N). With [SMA.WithWarmup](streaming.WarmupPartial)
// the first values emit the mean of the values seen so far. The policy
// is configuration, not state: a blob loads into a node of either policy.
//
// NaN and ±Inf inputs, and inputs beyond ±MaxFloat64/(2N) (which could
// overflow the window sum), are refused: the state is unchanged and Eval
// returns streaming.Rejected() for that record.
//
// State: TypeVersion 2 saves the window size, the values in the window and
// the compensated sum, so a restored SMA continues bit for bit like one that
// never stopped. Blobs of TypeVersion 1 (the window values only) are
// migrated; see [SMA.Migrate].
type SMA struct {
	streaming.Base
	buf    []float64 // inline[:n] for small windows: one allocation, one cache line less per event
	inline [smaInline]float64
	head   int // next slot to write
	count  int // values in the window, <= len(buf)
	sum    ksum
	lim    float64 // input bound: opstate.InputBound(N)
	// partial: emit the mean of the values seen while the window fills.
	partial bool
}

var (
	_ streaming.Operator = (*SMA)(nil)
	_ streaming.Arity    = (*SMA)(nil)
	_ streaming.Migrator = (*SMA)(nil)
)

// smaInline is the largest window stored inside the SMA value itself.
const smaInline = 8

// smaMaxWindow bounds the window a state blob may declare.
const smaMaxWindow = 1 << 24

// NewSMA returns an SMA over the last n values. It panics if n < 1 or
// n > 2^24, as a window of that size is a programming error; the panic
// surfaces when the graph is built.
func NewSMA(n int) *SMA {
	if n < 1 || n > smaMaxWindow {
		panic(fmt.Sprintf("ops.NewSMA: window %d is outside 1..%d", n, smaMaxWindow))
	}
	s := &SMA{lim: opstate.InputBound(n)}
	if n <= smaInline {
		s.buf = s.inline[:n]
	} else {
		s.buf = make([]float64, n)
	}
	return s
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns s. Call it before the first Eval, in the node's factory.
func (s *SMA) WithWarmup(w streaming.Warmup) *SMA {
	s.partial = w == streaming.WarmupPartial
	return s
}

// Name returns "sma".
func (*SMA) Name() string { return "sma" }

// TypeVersion returns 2.
func (*SMA) TypeVersion() uint32 { return 2 }

// Arity is exactly one input.
func (*SMA) Arity() (int, int) { return 1, 1 }

// Window returns N.
func (s *SMA) Window() int { return len(s.buf) }

// Reset empties the window.
func (s *SMA) Reset() {
	clear(s.buf)
	s.head, s.count, s.sum = 0, 0, ksum{}
}

// Eval adds in[0] to the window and emits the mean once the window is full.
func (s *SMA) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !(math.Abs(x) <= s.lim) {
		return streaming.Rejected()
	}
	// Work on locals so the compiler keeps the sum in registers and
	// checks the ring index once.
	buf, h, sum := s.buf, s.head, s.sum
	if h >= len(buf) {
		return streaming.NoOutput() // unreachable: head < len(buf) always
	}
	full := s.count == len(buf)
	var out float64
	if full {
		out = buf[h]
		sum.Add(-out)
	}
	sum.Add(x)
	if out != 0 && math.Abs(out) > opstate.CancelBound*math.Abs(sum.Value()) {
		// The value leaving outweighed what stays: the running sum's
		// rounding (relative to the value) may be all that is left of
		// it, and a window of zeros after 8e20 averaged 2.8e-17 for ever.
		// Sum what stays afresh; at most once per large value, so still
		// O(1) an event on average. Oldest first, not in ring order: a
		// restored SMA holds the ring rotated (Load puts the oldest at
		// 0), and must add in the same order to continue bit for bit.
		sum = ksum{}
		for i := h + 1; i < h+len(buf); i++ {
			j := i
			if j >= len(buf) {
				j -= len(buf)
			}
			sum.Add(buf[j])
		}
		sum.Add(x)
	}
	if !sum.Finite() {
		// Only a state loaded from a blob saved before the input bound
		// existed can get here.
		return streaming.Rejected()
	}
	if !full {
		s.count++
		full = s.count == len(buf)
	}
	buf[h] = x
	if h++; h == len(buf) {
		h = 0
	}
	s.head, s.sum = h, sum
	if !full {
		if s.partial {
			return streaming.Float(sum.Mean(s.count))
		}
		return streaming.NoOutput()
	}
	return streaming.Float(sum.Mean(len(buf)))
}

// Save writes: window | count | sum | comp | count values, oldest first.
func (s *SMA) Save() ([]byte, error) {
	dst := make([]byte, 0, 2*4+16+8*s.count)
	dst = putU(dst, uint64(len(s.buf)))
	dst = putU(dst, uint64(s.count))
	dst = putF(dst, s.sum.Sum)
	dst = putF(dst, s.sum.Comp)
	s.each(func(v float64) { dst = putF(dst, v) })
	return dst, nil
}

// each calls f on the window's values, oldest first.
func (s *SMA) each(f func(float64)) {
	start := s.head - s.count
	if start < 0 {
		start += len(s.buf)
	}
	for i := range s.count {
		f(s.buf[(start+i)%len(s.buf)])
	}
}

// Load reads a TypeVersion 2 blob. It refuses a blob saved with another
// window size.
func (s *SMA) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("window", smaMaxWindow)
	if d.Err == nil && n != len(s.buf) {
		return mismatch(s.Name(), "window", n, len(s.buf))
	}
	count := d.Count("value count", uint64(n))
	sum := ksum{Sum: d.Finite("sum"), Comp: d.Finite("compensation")}
	vals := make([]float64, count)
	for i := range vals {
		vals[i] = d.Finite("window value")
	}
	if err := d.Done(s.Name()); err != nil {
		return err
	}
	s.Reset()
	copy(s.buf, vals)
	s.count = count
	s.head = count % len(s.buf)
	s.sum = sum
	return nil
}

// MigratesFrom returns [1].
func (*SMA) MigratesFrom() []uint32 { return []uint32{1} }

// Migrate converts a TypeVersion 1 blob (window | count | count values,
// oldest first) to TypeVersion 2 by recomputing the compensated sum from
// the values, in window order.
func (s *SMA) Migrate(from uint32, data []byte) ([]byte, error) {
	if from != 1 {
		return nil, fmt.Errorf("sma: no migration from type version %d", from)
	}
	d := opstate.NewDecoder(data)
	n := d.Count("window", smaMaxWindow)
	count := d.Count("value count", uint64(n))
	var sum ksum
	out := make([]byte, 0, 2*4+16+8*count)
	vals := make([]float64, count)
	for i := range vals {
		vals[i] = d.Finite("window value")
		sum.Add(vals[i])
	}
	if err := d.Done(s.Name()); err != nil {
		return nil, err
	}
	out = putU(out, uint64(n))
	out = putU(out, uint64(count))
	out = putF(out, sum.Sum)
	out = putF(out, sum.Comp)
	for _, v := range vals {
		out = putF(out, v)
	}
	return out, nil
}
