package fintech

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// RSI is the Relative Strength Index with Wilder's smoothing (J. Welles
// Wilder, "New Concepts in Technical Trading Systems", 1978): the first
// average gain and loss are the simple means of the first N price changes,
// then avg ← (avg·(N−1) + current)/N, and RSI = 100 − 100/(1 + avgGain /
// avgLoss).
//
// Output: Float(RSI) in [0, 100]. When the average loss is 0 the RSI is
// 100, and when both averages are 0 (a flat market) it is 50.
//
// Warm-up: by default ([streaming.WarmupFull]) N+1 prices (N changes); no
// output before. With [RSI.WithWarmup](streaming.WarmupPartial) every
// price from the second on emits the RSI of the changes seen so far
// (Σgain/(Σgain+Σloss), which is what the first simple averages give);
// the averages are the same in both policies, a blob loads into a node
// of either.
//
// NaN and ±Inf prices, and prices beyond ±MaxFloat64/(4N) (whose changes
// could overflow the sums), are refused: the state is unchanged and Eval
// returns streaming.Rejected().
//
// State (TypeVersion 1): period | whether a price is held | last price |
// changes seen (capped at N) | average gain | average loss (during warm-up
// the averages hold the running sums).
type RSI struct {
	streaming.Base
	n          int
	has        bool
	prev       float64
	seen       int
	gain, loss float64
	lim        float64 // input bound: opstate.InputBound(2N)
	// partial: emit the RSI of the changes seen during warm-up.
	partial bool
}

var (
	_ streaming.Operator = (*RSI)(nil)
	_ streaming.Arity    = (*RSI)(nil)
)

// NewRSI returns an RSI with period n (14 is Wilder's). It panics if n < 1
// or n > 2^24.
func NewRSI(n int) *RSI {
	if n < 1 || n > maxWindow {
		panic(fmt.Sprintf("fintech.NewRSI: period %d is outside 1..%d", n, maxWindow))
	}
	return &RSI{n: n, lim: opstate.InputBound(2 * n)}
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns r. Call it before the first Eval, in the node's factory.
func (r *RSI) WithWarmup(w streaming.Warmup) *RSI {
	r.partial = w == streaming.WarmupPartial
	return r
}

// Name returns "rsi".
func (*RSI) Name() string { return "rsi" }

// TypeVersion returns 1.
func (*RSI) TypeVersion() uint32 { return 1 }

// Arity is exactly one input: the price.
func (*RSI) Arity() (int, int) { return 1, 1 }

// Reset forgets every price.
func (r *RSI) Reset() { r.has, r.prev, r.seen, r.gain, r.loss = false, 0, 0, 0, 0 }

// Eval folds the change from the previous price into the averages.
func (r *RSI) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	p := in[0].Float64()
	if !(math.Abs(p) <= r.lim) {
		return streaming.Rejected()
	}
	if !r.has {
		r.has, r.prev = true, p
		return streaming.NoOutput()
	}
	ch := p - r.prev
	var g, l float64
	if ch > 0 {
		g = ch
	} else {
		l = -ch
	}
	seen, gain, loss := r.seen, r.gain, r.loss
	if seen < r.n {
		seen++
		gain += g
		loss += l
		if seen == r.n {
			gain /= float64(r.n)
			loss /= float64(r.n)
		}
	} else {
		k := float64(r.n - 1)
		gain = (gain*k + g) / float64(r.n)
		loss = (loss*k + l) / float64(r.n)
	}
	if !finiteIn(ch) || !finiteIn(gain+loss) { // only after loading a blob saved before the bound existed
		return streaming.Rejected()
	}
	r.prev, r.seen, r.gain, r.loss = p, seen, gain, loss
	if seen < r.n {
		if r.partial {
			return rsiOf(gain, loss) // the sums: same ratio as their means
		}
		return streaming.NoOutput()
	}
	return rsiOf(gain, loss)
}

// rsiOf is the RSI of an average gain and loss: 50 when both are 0.
func rsiOf(gain, loss float64) streaming.NodeOutput {
	if gain+loss == 0 {
		return streaming.Float(50)
	}
	return streaming.Float(100 * (gain / (gain + loss))) // the ratio first: 100·gain may overflow
}

// Save writes: period | has | prev | seen | gain | loss.
func (r *RSI) Save() ([]byte, error) {
	dst := make([]byte, 0, 32)
	dst = putU(dst, uint64(r.n))
	dst = putB(dst, r.has)
	dst = putF(dst, r.prev)
	dst = putU(dst, uint64(r.seen))
	dst = putF(dst, r.gain)
	return putF(dst, r.loss), nil
}

// Load reads a blob made by Save; it refuses one saved with another period.
func (r *RSI) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("period", maxWindow)
	if d.Err == nil && n != r.n {
		return mismatch(r.Name(), "period", n, r.n)
	}
	has, prev := d.Bool(), d.Finite("last price")
	seen := d.Count("changes seen", uint64(r.n))
	gain, loss := d.Finite("average gain"), d.Finite("average loss")
	if d.Err == nil && (gain < 0 || loss < 0) {
		d.Fail("negative average gain %v or loss %v", gain, loss)
	}
	if err := d.Done(r.Name()); err != nil {
		return err
	}
	r.has, r.prev, r.seen, r.gain, r.loss = has, prev, seen, gain, loss
	return nil
}
