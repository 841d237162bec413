package fintech

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// Band selects which Bollinger value a node emits. A graph that needs
// several adds one Bollinger node per band; each keeps its own window
// (N floats), which keeps Computed a single value and each node's output
// self-describing.
type Band uint8

// The Bollinger values a node can emit.
const (
	Middle   Band = iota // the N-period simple moving average
	Upper                // middle + K·σ
	Lower                // middle − K·σ
	PercentB             // (price − lower)/(upper − lower); 0.5 when the bands coincide
)

func (b Band) String() string {
	switch b {
	case Middle:
		return "middle"
	case Upper:
		return "upper"
	case Lower:
		return "lower"
	case PercentB:
		return "percent_b"
	}
	return fmt.Sprintf("band(%d)", uint8(b))
}

// Bollinger computes John Bollinger's bands ("Bollinger on Bollinger
// Bands", 2001): the middle band is the N-period simple moving average, the
// upper and lower bands lie K population standard deviations of the same
// N prices above and below it (N = 20, K = 2 classically).
//
// Output: streaming.Sig(position, value) where value is the selected
// [Band] and position is [AboveBand], [InsideBands] or [BelowBand] — where
// the latest price stands against the bands.
//
// Warm-up: by default ([streaming.WarmupFull]) no output until N prices
// have been seen. With [Bollinger.WithWarmup](streaming.WarmupPartial) the
// first prices emit the bands of the prices seen so far (mean and
// population deviation of those); the policy is not state, a blob loads
// into a node of either.
//
// NaN and ±Inf prices, and prices beyond ±√(MaxFloat64/(16N)) (about
// 3e153/√N, whose squared deviations could overflow), are refused: the
// state is unchanged and Eval returns streaming.Rejected(). A band that
// overflows (a huge K) is not emitted.
//
// Numerics: the mean and the sum of squared deviations are updated in O(1)
// per price (Welford's update for a sliding window) and recomputed exactly
// from the window every N prices, so rounding never accumulates, and
// whenever the sum of squared deviations falls below a 2^-20 part of its
// largest value since it was last recomputed (an outlier leaving, or
// several, one after the other), so the rounding residue of what left
// never stands for the deviation of what stays.
//
// State (TypeVersion 2): window | K | band | count | head | mean | sum of
// squared deviations | its largest value since recomputed | the ring's
// values. TypeVersion 1 blobs (without the largest value) are migrated;
// see [Bollinger.Migrate].
type Bollinger struct {
	streaming.Base
	k     float64
	band  Band
	buf   []float64
	head  int
	count int
	mean  float64
	m2    float64 // Σ(x − mean)² over the window
	// peak is the largest m2 since exact last recomputed it: the
	// updates since rounded relative to it, not to the m2 before each.
	peak float64
	lim  float64 // input bound: √opstate.InputBound(8N)
	// partial: emit the bands of the prices seen while the window fills.
	partial bool
}

var (
	_ streaming.Operator = (*Bollinger)(nil)
	_ streaming.Arity    = (*Bollinger)(nil)
	_ streaming.Migrator = (*Bollinger)(nil)
)

// NewBollinger returns Bollinger bands over n prices at k standard
// deviations, emitting band. It panics if n is outside 1..2^24, k is
// negative or not finite, or band is unknown.
func NewBollinger(n int, k float64, band Band) *Bollinger {
	if n < 1 || n > maxWindow {
		panic(fmt.Sprintf("fintech.NewBollinger: window %d is outside 1..%d", n, maxWindow))
	}
	if !finiteIn(k) || k < 0 {
		panic(fmt.Sprintf("fintech.NewBollinger: K must be finite and not negative, got %v", k))
	}
	if band > PercentB {
		panic(fmt.Sprintf("fintech.NewBollinger: unknown %v", band))
	}
	return &Bollinger{k: k, band: band, buf: make([]float64, n), lim: math.Sqrt(opstate.InputBound(8 * n))}
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns b. Call it before the first Eval, in the node's factory.
func (b *Bollinger) WithWarmup(w streaming.Warmup) *Bollinger {
	b.partial = w == streaming.WarmupPartial
	return b
}

// Name returns "bollinger".
func (*Bollinger) Name() string { return "bollinger" }

// TypeVersion returns 2.
func (*Bollinger) TypeVersion() uint32 { return 2 }

// Arity is exactly one input: the price.
func (*Bollinger) Arity() (int, int) { return 1, 1 }

// Reset empties the window.
func (b *Bollinger) Reset() { b.head, b.count, b.mean, b.m2, b.peak = 0, 0, 0, 0, 0 }

// Eval adds the price and emits the selected band once the window is full.
func (b *Bollinger) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !(math.Abs(x) <= b.lim) {
		return streaming.Rejected()
	}
	n := len(b.buf)
	count, mean, m2 := b.count, b.mean, b.m2
	cancelled := false
	if count < n {
		count++
		d := x - mean
		mean += d / float64(count)
		m2 += d * (x - mean)
	} else {
		old := b.buf[b.head]
		next := mean + (x-old)/float64(n)
		m2 += (x - old) * (x - next + old - mean)
		mean = next
		// The prices that left since the last recomputation outweighed
		// what stays: the updates' rounding (relative to the largest m2
		// since, not only the one before this price: outliers of 1e9,
		// 7e5 and 1e3 leaving one after the other each took less than
		// 2^20 of it but together all of it, and a window of zeros had
		// a σ of 1.5) may be all that is left of m2.
		cancelled = max(b.peak, b.m2) > cancelBound*max(m2, 0)
	}
	if !finiteIn(mean) || !finiteIn(m2) { // only after loading a blob saved before the bound existed
		return streaming.Rejected()
	}
	b.count, b.mean, b.m2, b.peak = count, mean, m2, max(b.peak, m2)
	b.buf[b.head] = x
	b.head++
	if b.head == n {
		b.head = 0
		b.exact()
	} else if cancelled {
		b.exact()
	}
	if b.count < n && !b.partial {
		return streaming.NoOutput()
	}
	sd := math.Sqrt(max(b.m2, 0) / float64(b.count))
	upper, lower := b.mean+b.k*sd, b.mean-b.k*sd
	pos := InsideBands
	if x > upper {
		pos = AboveBand
	} else if x < lower {
		pos = BelowBand
	}
	var v float64
	switch b.band {
	case Middle:
		v = b.mean
	case Upper:
		v = upper
	case Lower:
		v = lower
	case PercentB:
		v = 0.5
		if upper > lower {
			v = (x - lower) / (upper - lower)
			if !finiteIn(upper - lower) {
				// Bands so wide (a huge K) that their width overflows
				// while both are finite: halve first, which cannot.
				v = (x/2 - lower/2) / (upper/2 - lower/2)
			}
		}
	}
	if !finiteIn(v) {
		return streaming.NoOutput()
	}
	return streaming.Sig(pos, v)
}

// exact recomputes mean and m2 from the (full) window by two passes. The
// plain sum's rounding makes s/N miss the mean (20 × 0.1 sums to
// 2.0000000000000004), which for a flat window is a σ above 0 and a %B of
// 0.25; the deviations from that first mean, summed, correct it (the
// corrected two-pass algorithm), exactly so for a window of one value.
func (b *Bollinger) exact() {
	var s float64
	for _, v := range b.buf {
		s += v
	}
	n := float64(len(b.buf))
	mean := s / n
	var c float64
	for _, v := range b.buf {
		c += v - mean
	}
	mean += c / n
	var m2 float64
	for _, v := range b.buf {
		m2 += (v - mean) * (v - mean)
	}
	b.mean, b.m2, b.peak = mean, m2, m2
}

// Save writes: window | K | band | count | head | mean | m2 | peak | count
// values.
func (b *Bollinger) Save() ([]byte, error) {
	dst := make([]byte, 0, 56+8*b.count)
	dst = putU(dst, uint64(len(b.buf)))
	dst = putF(dst, b.k)
	dst = putU(dst, uint64(b.band))
	dst = putU(dst, uint64(b.count))
	dst = putU(dst, uint64(b.head))
	dst = putF(dst, b.mean)
	dst = putF(dst, b.m2)
	dst = putF(dst, b.peak)
	for _, v := range b.buf[:b.count] {
		dst = putF(dst, v)
	}
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with another
// window, K or band.
func (b *Bollinger) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("window", maxWindow)
	k := d.F()
	band := Band(d.Count("band", 255))
	if d.Err == nil && (n != len(b.buf) || k != b.k || band != b.band) {
		return mismatch(b.Name(), "window, K and band", fmt.Sprint(n, " ", k, " ", band), fmt.Sprint(len(b.buf), " ", b.k, " ", b.band))
	}
	count := d.Count("count", uint64(n))
	head := d.Count("head", uint64(n-1))
	if d.Err == nil && count < n && head != count%n {
		d.Fail("head %d does not fit count %d", head, count)
	}
	mean, m2, peak := d.Finite("mean"), d.Finite("m2"), d.Finite("largest m2")
	vals := make([]float64, count)
	for i := range vals {
		vals[i] = d.Finite("window value")
	}
	if err := d.Done(b.Name()); err != nil {
		return err
	}
	copy(b.buf, vals)
	b.count, b.head, b.mean, b.m2, b.peak = count, head, mean, m2, peak
	return nil
}

// MigratesFrom returns [1].
func (*Bollinger) MigratesFrom() []uint32 { return []uint32{1} }

// Migrate converts a TypeVersion 1 blob (no largest m2) to TypeVersion 2
// by inserting the saved m2 as the largest since the last recomputation:
// what a version 1 Bollinger compared with.
func (b *Bollinger) Migrate(from uint32, data []byte) ([]byte, error) {
	if from != 1 {
		return nil, fmt.Errorf("bollinger: no migration from type version %d", from)
	}
	d := opstate.NewDecoder(data)
	d.Count("window", maxWindow)
	d.F()
	d.Count("band", 255)
	d.Count("count", maxWindow)
	d.Count("head", maxWindow)
	d.Finite("mean")
	m2 := d.Finite("m2")
	if d.Err != nil {
		return nil, d.Done(b.Name())
	}
	out := make([]byte, 0, len(data)+8)
	out = append(out, data[:d.Off]...)
	out = putF(out, m2)
	return append(out, data[d.Off:]...), nil
}
