package fintech

import (
	"math"

	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// ksum is the compensated running sum (opstate.KSum).
type ksum = opstate.KSum

// window is a ring of the last n values with their compensated sum: the
// moving-average core shared by the operators of this package.
type window struct {
	buf   []float64
	head  int // next slot to write
	count int
	sum   ksum
}

func newWindow(n int) window { return window{buf: make([]float64, n)} }

func (w *window) full() bool { return w.count == len(w.buf) }

// cancelBound: when the value leaving a window is more than this many
// times the sum that stays, the running sum's rounding (relative to the
// values it held) may be all that is left of it, and try sums the ring
// afresh.
const cancelBound = opstate.CancelBound

// try returns the window's sum after pushing x, and whether it is finite
// (the window is not changed: a caller pushing into two windows checks
// both before committing either with put). Where the value leaving
// outweighs what stays by cancelBound, the sum is the ring's, summed
// afresh: a volume of 8e20 leaving a window of zero volumes left a
// residue, and VWAP divided residue by residue. That happens at most
// once per large value, so it stays O(1) an event on average.
func (w *window) try(x float64) (ksum, bool) {
	sum := w.sum
	var out float64
	full := w.count == len(w.buf)
	if full {
		out = w.buf[w.head]
		sum.Add(-out)
	}
	sum.Add(x)
	if out != 0 && math.Abs(out) > cancelBound*math.Abs(sum.Value()) {
		sum = ksum{}
		for i, v := range w.buf[:w.count] {
			if !full || i != w.head {
				sum.Add(v)
			}
		}
		sum.Add(x)
	}
	return sum, sum.Finite()
}

// put pushes x with the sum try returned for it.
func (w *window) put(x float64, sum ksum) {
	if w.count < len(w.buf) {
		w.count++
	}
	w.buf[w.head] = x
	w.sum = sum
	w.head++
	if w.head == len(w.buf) {
		w.head = 0
	}
}

func (w *window) mean() float64 { return w.sum.Mean(w.count) }

func (w *window) reset() {
	clear(w.buf)
	w.head, w.count, w.sum = 0, 0, ksum{}
}

// save writes: n | count | head | sum | comp | the ring (count slots from 0).
func (w *window) save(dst []byte) []byte {
	dst = putU(dst, uint64(len(w.buf)))
	dst = putU(dst, uint64(w.count))
	dst = putU(dst, uint64(w.head))
	dst = putF(dst, w.sum.Sum)
	dst = putF(dst, w.sum.Comp)
	for _, v := range w.buf[:w.count] {
		dst = putF(dst, v)
	}
	return dst
}

// load reads what save wrote into a fresh window of the same size; the
// caller commits it only if the whole blob decodes.
// It returns the saved window size; a size other than w's leaves d
// positioned mid-blob and the caller must refuse the blob.
func (w *window) load(d *decoder, what string) (window, int) {
	n := d.Count(what+" window", maxWindow)
	if d.Err == nil && n != len(w.buf) {
		return window{}, n
	}
	out := window{buf: make([]float64, len(w.buf))}
	out.count = d.Count(what+" count", uint64(n))
	out.head = d.Count(what+" head", uint64(n))
	if d.Err == nil && (out.count < n && out.head != out.count || out.count == n && out.head >= n) {
		d.Fail("%s head %d does not fit count %d of window %d", what, out.head, out.count, n)
	}
	out.sum = ksum{Sum: d.Finite(what + " sum"), Comp: d.Finite(what + " compensation")}
	for i := range out.count {
		out.buf[i] = d.Finite(what + " value")
	}
	return out, n
}

// maxWindow bounds windows and periods, in constructors and in blobs.
const maxWindow = 1 << 24

// ema is an exponential moving average with period n seeded by the simple
// mean of its first n values. The seed sum is compensated and the seed is
// its corrected mean ([opstate.KSum.Mean]), so a flat market seeds exactly
// its price (a plain sum made 0.1 three times average 0.10000000000000002).
type ema struct {
	n     int
	alpha float64
	seen  int
	seed  ksum
	value float64
}

func newEMA(n int) ema { return ema{n: n, alpha: 2 / float64(n+1)} }

// finite reports whether the EMA's state is finite.
func (e *ema) finite() bool { return e.seed.Finite() && finiteIn(e.value) }

// push folds x in and reports whether the average is seeded.
func (e *ema) push(x float64) bool {
	if e.seen < e.n {
		e.seen++
		e.seed.Add(x)
		if e.seen == e.n {
			e.value = e.seed.Mean(e.n)
			return true
		}
		return false
	}
	e.value += e.alpha * (x - e.value)
	return true
}

func (e *ema) ready() bool { return e.seen == e.n }

// current is the average once seeded, and the mean of the inputs seen so
// far before (NaN before the first input).
func (e *ema) current() float64 {
	if e.seen < e.n {
		return e.seed.Mean(e.seen)
	}
	return e.value
}

func (e *ema) reset() { e.seen, e.seed, e.value = 0, ksum{}, 0 }

func (e *ema) save(dst []byte) []byte {
	dst = putU(dst, uint64(e.seen))
	dst = putF(dst, e.seed.Sum)
	dst = putF(dst, e.seed.Comp)
	return putF(dst, e.value)
}

func (e *ema) load(d *decoder, what string) ema {
	out := *e
	out.seen = d.Count(what+" values seen", uint64(e.n))
	out.seed = ksum{Sum: d.Finite(what + " seed sum"), Comp: d.Finite(what + " seed compensation")}
	out.value = d.Finite(what + " average")
	return out
}
