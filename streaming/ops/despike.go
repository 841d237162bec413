package ops

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
	"math"
	"slices"

	"github.com/tflo-io/tflo/streaming"
)

// MedianDespike removes isolated spikes: it keeps the last N raw values
// and, for each new value x, compares x with the median m of that window
// (x included). When |x − m| > maxDev, x is a spike and the node emits m in
// its place; otherwise it emits x unchanged. The window always holds the
// raw values, so a sustained step passes through once it fills half the
// window — only short excursions are removed. For an even N the median is
// the mean of the two middle values.
//
// Cost: O(N) per event (a sorted copy of the window is kept by binary
// search and one memmove), no allocation; meant for the small windows
// (3–15) despiking uses.
//
// Warm-up: by default ([streaming.WarmupFull]) no output until N values
// have been seen. With [MedianDespike.WithWarmup](streaming.WarmupPartial)
// the first values are compared with the median of the values seen so far
// (x included); the policy is not state, a blob loads into a node of
// either.
//
// NaN and ±Inf inputs are refused: state unchanged, Eval returns
// streaming.Rejected(). Any finite value is taken (the state holds raw
// values, no sums; the even-window median halves values beyond ±1 before
// adding them, so it cannot overflow).
//
// State (TypeVersion 1): window | maxDev | count | values oldest first
// (the sorted copy is rebuilt on Load).
type MedianDespike struct {
	streaming.Base
	maxDev float64
	buf    []float64 // ring, oldest at head when full
	sorted []float64 // the window's values in order, len == count
	head   int
	count  int
	// partial: despike against the median of the values seen while the
	// window fills.
	partial bool
}

var (
	_ streaming.Operator = (*MedianDespike)(nil)
	_ streaming.Arity    = (*MedianDespike)(nil)
)

const despikeMaxWindow = 1 << 16

// NewMedianDespike returns a despike filter over the last n values that
// replaces values further than maxDev from the median. It panics if n is
// outside 1..65536 or maxDev is negative or not finite.
func NewMedianDespike(n int, maxDev float64) *MedianDespike {
	if n < 1 || n > despikeMaxWindow {
		panic(fmt.Sprintf("ops.NewMedianDespike: window %d is outside 1..%d", n, despikeMaxWindow))
	}
	if !finiteIn(maxDev) || maxDev < 0 {
		panic(fmt.Sprintf("ops.NewMedianDespike: maxDev must be finite and not negative, got %v", maxDev))
	}
	return &MedianDespike{maxDev: maxDev, buf: make([]float64, n), sorted: make([]float64, 0, n)}
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns m. Call it before the first Eval, in the node's factory.
func (m *MedianDespike) WithWarmup(w streaming.Warmup) *MedianDespike {
	m.partial = w == streaming.WarmupPartial
	return m
}

// Name returns "median_despike".
func (*MedianDespike) Name() string { return "median_despike" }

// TypeVersion returns 1.
func (*MedianDespike) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*MedianDespike) Arity() (int, int) { return 1, 1 }

// Reset empties the window.
func (m *MedianDespike) Reset() {
	m.head, m.count = 0, 0
	m.sorted = m.sorted[:0]
}

// Eval pushes in[0] and emits it, or the window median if it is a spike.
func (m *MedianDespike) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !finiteIn(x) {
		return streaming.Rejected()
	}
	n := len(m.buf)
	if m.count == n {
		old := m.buf[m.head]
		i, _ := slices.BinarySearch(m.sorted, old)
		m.sorted = slices.Delete(m.sorted, i, i+1)
	} else {
		m.count++
	}
	m.buf[m.head] = x
	m.head++
	if m.head == n {
		m.head = 0
	}
	i, _ := slices.BinarySearch(m.sorted, x)
	m.sorted = slices.Insert(m.sorted, i, x)
	if m.count < n && !m.partial {
		return streaming.NoOutput()
	}
	med := m.median()
	if math.Abs(x-med) > m.maxDev {
		return streaming.Float(med)
	}
	return streaming.Float(x)
}

func (m *MedianDespike) median() float64 {
	k := len(m.sorted)
	if k%2 == 1 {
		return m.sorted[k/2]
	}
	a, b := m.sorted[k/2-1], m.sorted[k/2]
	if math.Abs(a) < 1 && math.Abs(b) < 1 {
		// Cannot overflow, and halving each first would round a
		// subnormal's odd last bit away: the median of two 5e-324 was 0.
		return (a + b) / 2
	}
	// Halve first: (a+b)/2 overflows for two values near ±MaxFloat64, and
	// halving is exact for every normal float.
	return a/2 + b/2
}

// Save writes: window | maxDev | count | values oldest first.
func (m *MedianDespike) Save() ([]byte, error) {
	n := len(m.buf)
	dst := make([]byte, 0, 20+8*m.count)
	dst = putU(dst, uint64(n))
	dst = putF(dst, m.maxDev)
	dst = putU(dst, uint64(m.count))
	start := (m.head - m.count + n) % n
	for i := range m.count {
		dst = putF(dst, m.buf[(start+i)%n])
	}
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with another window
// or maxDev.
func (m *MedianDespike) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("window", despikeMaxWindow)
	maxDev := d.F()
	if d.Err == nil && (n != len(m.buf) || maxDev != m.maxDev) {
		return mismatch(m.Name(), "window and maxDev", fmt.Sprint(n, " ", maxDev), fmt.Sprint(len(m.buf), " ", m.maxDev))
	}
	count := d.Count("value count", uint64(n))
	vals := make([]float64, count)
	for i := range vals {
		vals[i] = d.Finite("window value")
	}
	if err := d.Done(m.Name()); err != nil {
		return err
	}
	m.Reset()
	copy(m.buf, vals)
	m.count = count
	m.head = count % n
	m.sorted = append(m.sorted, vals...)
	slices.Sort(m.sorted)
	return nil
}
