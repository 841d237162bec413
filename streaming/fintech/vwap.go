package fintech

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// VWAP is the volume-weighted average price Σ(price·volume) / Σ volume,
// either cumulative (window 0: since the start or the last Reset, e.g. a
// session) or over the last N trades.
//
// Inputs: price, volume (in that order).
//
// Output: Float(vwap) for every valid record once the total volume in the
// window is positive. A window holding only zero-volume trades emits
// nothing.
//
// Warm-up of a rolling window: by default ([streaming.WarmupPartial], the
// behaviour VWAP always had) the first trades emit the VWAP of the trades
// seen so far; with [VWAP.WithWarmup](streaming.WarmupFull) nothing is
// emitted until N trades were seen. A cumulative VWAP has no window and
// ignores the policy. The policy is not state: a blob loads into a node
// of either.
//
// A record whose price or volume is NaN or ±Inf, or whose volume is
// negative, is refused: the state is unchanged and Eval returns
// streaming.Rejected(). So is a trade that could overflow the sums: in a
// rolling window, p·v or v beyond ±MaxFloat64/(2N); in a cumulative one, a
// trade that would take Σp·v or Σv beyond MaxFloat64 (the session's sums
// are full; Reset starts a new one). Zero volume is a valid trade that
// counts toward the window but not the average.
//
// Numerics: the VWAP is the ratio of the compensated sums corrected by
// the division's residual ([opstate.Ratio]), and a cumulative VWAP adds
// each product's rounding to Σp·v's compensation, so a flat price gives
// exactly that price (in a rolling window, when the products p·v are
// exact: the window keeps the rounded products only).
//
// State (TypeVersion 1): window | for a cumulative VWAP (window 0), Σp·v
// and Σv, each a compensated sum; for a rolling window, the window of the
// products p·v, then the window of the volumes v, each as its size,
// count, head, compensated sum and values.
type VWAP struct {
	streaming.Base
	pv, v window // rolling: the last N products and volumes
	cpv   ksum   // cumulative Σp·v (window 0)
	cv    ksum   // cumulative Σv (window 0)
	n     int
	lim   float64 // rolling: bound of p·v and v, opstate.InputBound(N)
	// full: no output until the rolling window holds N trades.
	full bool
}

var (
	_ streaming.Operator = (*VWAP)(nil)
	_ streaming.Arity    = (*VWAP)(nil)
)

// NewVWAP returns a VWAP over the last n trades, or cumulative for n = 0.
// It panics if n is negative or above 2^24.
func NewVWAP(n int) *VWAP {
	if n < 0 || n > maxWindow {
		panic(fmt.Sprintf("fintech.NewVWAP: window %d is outside 0..%d", n, maxWindow))
	}
	w := &VWAP{n: n}
	if n > 0 {
		w.pv, w.v = newWindow(n), newWindow(n)
		w.lim = opstate.InputBound(n)
	}
	return w
}

// WithWarmup sets the warm-up policy of a rolling window (default
// streaming.WarmupPartial) and returns w. Call it before the first Eval,
// in the node's factory.
func (w *VWAP) WithWarmup(p streaming.Warmup) *VWAP {
	w.full = p == streaming.WarmupFull
	return w
}

// Name returns "vwap".
func (*VWAP) Name() string { return "vwap" }

// TypeVersion returns 1.
func (*VWAP) TypeVersion() uint32 { return 1 }

// Arity is exactly two inputs: price, volume.
func (*VWAP) Arity() (int, int) { return 2, 2 }

// Reset forgets every trade (start a new session).
func (w *VWAP) Reset() {
	w.pv.reset()
	w.v.reset()
	w.cpv, w.cv = ksum{}, ksum{}
}

// Eval adds the trade (in[0] price, in[1] volume) and emits the VWAP.
func (w *VWAP) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	p, vol := in[0].Float64(), in[1].Float64()
	pv := p * vol
	if !finiteIn(pv) || !(vol >= 0) {
		return streaming.Rejected() // NaN, ±Inf, negative volume or an overflowing product
	}
	var num, den ksum
	if w.n == 0 {
		cpv, cv := w.cpv, w.cv
		cpv.Add(pv)
		// The product's rounding, exact by FMA, goes into the
		// compensation: Σp·v is then the sum of the exact products, and
		// a flat price p gives exactly p (0.1·3 rounds to
		// 0.30000000000000004, and the VWAP was 0.10000000000000002).
		cpv.Comp += math.FMA(p, vol, -pv)
		cv.Add(vol)
		if !cpv.Finite() || !cv.Finite() {
			return streaming.Rejected()
		}
		w.cpv, w.cv = cpv, cv
		num, den = cpv, cv
	} else {
		if !(math.Abs(pv) <= w.lim && vol <= w.lim) {
			return streaming.Rejected()
		}
		spv, ok1 := w.pv.try(pv)
		sv, ok2 := w.v.try(vol)
		if !ok1 || !ok2 { // only after loading a blob saved before the bound existed
			return streaming.Rejected()
		}
		w.pv.put(pv, spv)
		w.v.put(vol, sv)
		if w.full && !w.v.full() {
			return streaming.NoOutput()
		}
		num, den = spv, sv
	}
	if den.Value() <= 0 {
		return streaming.NoOutput()
	}
	r := opstate.Ratio(num, den)
	if !finiteIn(r) {
		return streaming.NoOutput()
	}
	return streaming.Float(r)
}

// Save writes: window | cumulative sums, or the two rolling windows.
func (w *VWAP) Save() ([]byte, error) {
	dst := make([]byte, 0, 40+16*w.pv.count)
	dst = putU(dst, uint64(w.n))
	if w.n == 0 {
		dst = putF(dst, w.cpv.Sum)
		dst = putF(dst, w.cpv.Comp)
		dst = putF(dst, w.cv.Sum)
		return putF(dst, w.cv.Comp), nil
	}
	dst = w.pv.save(dst)
	return w.v.save(dst), nil
}

// Load reads a blob made by Save; it refuses one saved with another window.
func (w *VWAP) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("window", maxWindow)
	if d.Err == nil && n != w.n {
		return mismatch(w.Name(), "window", n, w.n)
	}
	if n == 0 {
		cpv := ksum{Sum: d.Finite("Σp·v"), Comp: d.Finite("Σp·v compensation")}
		cv := ksum{Sum: d.Finite("Σv"), Comp: d.Finite("Σv compensation")}
		if err := d.Done(w.Name()); err != nil {
			return err
		}
		w.cpv, w.cv = cpv, cv
		return nil
	}
	pv, nPV := w.pv.load(&d, "p·v")
	v, nV := w.v.load(&d, "volume")
	if d.Err == nil && (nPV != n || nV != n) {
		d.Fail("inner window sizes %d and %d differ from the window %d", nPV, nV, n)
	}
	if d.Err == nil && (pv.count != v.count || pv.head != v.head) {
		d.Fail("p·v and volume windows disagree on count or head")
	}
	if err := d.Done(w.Name()); err != nil {
		return err
	}
	w.pv, w.v = pv, v
	return nil
}
