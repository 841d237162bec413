package fintech

import "math"

// ksum is a running sum with Neumaier compensation: adding and removing
// values for ever (a sliding window) keeps the error of a single addition
// instead of accumulating one rounding error per event.
type ksum struct {
	sum, comp float64
}

func (s *ksum) add(x float64) {
	t := s.sum + x
	if math.Abs(s.sum) >= math.Abs(x) {
		s.comp += (s.sum - t) + x
	} else {
		s.comp += (x - t) + s.sum
	}
	s.sum = t
}

func (s *ksum) value() float64 { return s.sum + s.comp }

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

func (w *window) push(x float64) {
	if w.count == len(w.buf) {
		w.sum.add(-w.buf[w.head])
	} else {
		w.count++
	}
	w.buf[w.head] = x
	w.sum.add(x)
	w.head++
	if w.head == len(w.buf) {
		w.head = 0
	}
}

func (w *window) mean() float64 { return w.sum.value() / float64(w.count) }

func (w *window) reset() {
	clear(w.buf)
	w.head, w.count, w.sum = 0, 0, ksum{}
}

// save writes: n | count | head | sum | comp | the ring (count slots from 0).
func (w *window) save(dst []byte) []byte {
	dst = putU(dst, uint64(len(w.buf)))
	dst = putU(dst, uint64(w.count))
	dst = putU(dst, uint64(w.head))
	dst = putF(dst, w.sum.sum)
	dst = putF(dst, w.sum.comp)
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
	n := d.count(what+" window", maxWindow)
	if d.err == nil && n != len(w.buf) {
		return window{}, n
	}
	out := window{buf: make([]float64, len(w.buf))}
	out.count = d.count(what+" count", uint64(n))
	out.head = d.count(what+" head", uint64(n))
	if d.err == nil && (out.count < n && out.head != out.count || out.count == n && out.head >= n) {
		d.fail("%s head %d does not fit count %d of window %d", what, out.head, out.count, n)
	}
	out.sum = ksum{sum: d.finite(what + " sum"), comp: d.finite(what + " compensation")}
	for i := range out.count {
		out.buf[i] = d.finite(what + " value")
	}
	return out, n
}

// maxWindow bounds windows and periods, in constructors and in blobs.
const maxWindow = 1 << 24

// ema is an exponential moving average with period n seeded by the simple
// mean of its first n values.
type ema struct {
	n     int
	alpha float64
	seen  int
	seed  float64
	value float64
}

func newEMA(n int) ema { return ema{n: n, alpha: 2 / float64(n+1)} }

// push folds x in and reports whether the average is seeded.
func (e *ema) push(x float64) bool {
	if e.seen < e.n {
		e.seen++
		e.seed += x
		if e.seen == e.n {
			e.value = e.seed / float64(e.n)
			return true
		}
		return false
	}
	e.value += e.alpha * (x - e.value)
	return true
}

func (e *ema) ready() bool { return e.seen == e.n }

func (e *ema) reset() { e.seen, e.seed, e.value = 0, 0, 0 }

func (e *ema) save(dst []byte) []byte {
	dst = putU(dst, uint64(e.seen))
	dst = putF(dst, e.seed)
	return putF(dst, e.value)
}

func (e *ema) load(d *decoder, what string) ema {
	out := *e
	out.seen = d.count(what+" values seen", uint64(e.n))
	out.seed = d.finite(what + " seed sum")
	out.value = d.finite(what + " average")
	return out
}
