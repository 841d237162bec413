package fintech

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// meanTolerance is the relative difference up to which two moving
// averages count as equal: a few units of rounding (2^-50, about 9e-16)
// of the compensated sums and their divisions.
const meanTolerance = 0x1p-50

// MACrossover detects crossings of a fast and a slow simple moving average
// of the price (the "golden cross" / "death cross" of chartists, 50/200
// days classically).
//
// Output: streaming.Sig([GoldenCross], fastMA) on the record where the fast
// average moves from below the slow one to above it,
// streaming.Sig([DeathCross], fastMA) for the opposite, nothing on every
// other record. Equal averages keep the previous side, so touching is not
// crossing; averages that differ only by rounding (relatively by at most
// 2^-50, as over a flat stretch of prices) count as equal.
//
// Warm-up: by default ([streaming.WarmupFull]) slow prices fill both
// averages; the first record where they differ only establishes the side
// and never emits. With [MACrossover.WithWarmup](streaming.WarmupPartial)
// the averages are taken over the prices seen so far from the first price
// on, so the side is established (and crossings reported) while the
// windows fill. The policy is not saved: a blob loads into a node of
// either, keeping the side it knows.
//
// NaN and ±Inf prices, and prices beyond ±MaxFloat64/(2·slow) (which
// could overflow the window sums), are refused: the state is unchanged and
// Eval returns streaming.Rejected().
//
// State (TypeVersion 1): both windows (size, count, head, compensated sum,
// values) | whether a side is known | the side.
type MACrossover struct {
	streaming.Base
	fast, slow window
	lim        float64 // input bound: opstate.InputBound(slow)
	known      bool
	above      bool
	// partial: compare the averages while the windows fill.
	partial bool
}

var (
	_ streaming.Operator = (*MACrossover)(nil)
	_ streaming.Arity    = (*MACrossover)(nil)
)

// NewMACrossover returns a crossover detector of SMA(fast) and SMA(slow).
// It panics unless 1 ≤ fast < slow ≤ 2^24.
func NewMACrossover(fast, slow int) *MACrossover {
	if fast < 1 || slow <= fast || slow > maxWindow {
		panic(fmt.Sprintf("fintech.NewMACrossover: need 1 ≤ fast < slow ≤ %d, got %d, %d", maxWindow, fast, slow))
	}
	return &MACrossover{fast: newWindow(fast), slow: newWindow(slow), lim: opstate.InputBound(slow)}
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns c. Call it before the first Eval, in the node's factory.
func (c *MACrossover) WithWarmup(w streaming.Warmup) *MACrossover {
	c.partial = w == streaming.WarmupPartial
	return c
}

// Name returns "ma_crossover".
func (*MACrossover) Name() string { return "ma_crossover" }

// TypeVersion returns 1.
func (*MACrossover) TypeVersion() uint32 { return 1 }

// Arity is exactly one input: the price.
func (*MACrossover) Arity() (int, int) { return 1, 1 }

// Reset forgets every price.
func (c *MACrossover) Reset() {
	c.fast.reset()
	c.slow.reset()
	c.known, c.above = false, false
}

// Eval updates both averages and emits on a crossing.
func (c *MACrossover) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	p := in[0].Float64()
	if !(math.Abs(p) <= c.lim) {
		return streaming.Rejected()
	}
	sf, ok1 := c.fast.try(p)
	ss, ok2 := c.slow.try(p)
	if !ok1 || !ok2 { // only after loading a blob saved before the bound existed
		return streaming.Rejected()
	}
	c.fast.put(p, sf)
	c.slow.put(p, ss)
	if !c.slow.full() && !c.partial {
		return streaming.NoOutput()
	}
	f, s := c.fast.mean(), c.slow.mean()
	if math.Abs(f-s) <= meanTolerance*max(math.Abs(f), math.Abs(s)) {
		// Equal up to the rounding of their sums and divisions: two
		// windows of different values with one exact mean can average
		// a few units apart, which is touching, not a side.
		return streaming.NoOutput()
	}
	above := f > s
	if !c.known {
		c.known, c.above = true, above
		return streaming.NoOutput()
	}
	if above == c.above {
		return streaming.NoOutput()
	}
	c.above = above
	if above {
		return streaming.Sig(GoldenCross, f)
	}
	return streaming.Sig(DeathCross, f)
}

// Save writes: fast window | slow window | known | above.
func (c *MACrossover) Save() ([]byte, error) {
	dst := make([]byte, 0, 64+8*(c.fast.count+c.slow.count))
	dst = c.fast.save(dst)
	dst = c.slow.save(dst)
	dst = putB(dst, c.known)
	return putB(dst, c.above), nil
}

// Load reads a blob made by Save; it refuses one saved with other windows.
func (c *MACrossover) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	fast, nF := c.fast.load(&d, "fast")
	if d.Err == nil && nF != len(c.fast.buf) {
		return mismatch(c.Name(), "fast window", nF, len(c.fast.buf))
	}
	slow, nS := c.slow.load(&d, "slow")
	if d.Err == nil && nS != len(c.slow.buf) {
		return mismatch(c.Name(), "slow window", nS, len(c.slow.buf))
	}
	known, above := d.Bool(), d.Bool()
	if err := d.Done(c.Name()); err != nil {
		return err
	}
	c.fast, c.slow, c.known, c.above = fast, slow, known, above
	return nil
}
