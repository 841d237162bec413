package fintech

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// MACDComponent selects which MACD value a node emits. A graph that needs
// several adds one MACD node per component (each keeps three EMAs: a few
// floats), which keeps Computed a single value.
type MACDComponent uint8

// The MACD values a node can emit.
const (
	MACDLine      MACDComponent = iota // EMA(fast) − EMA(slow)
	MACDSignal                         // EMA(signal) of the MACD line
	MACDHistogram                      // MACD line − signal line
)

func (c MACDComponent) String() string {
	switch c {
	case MACDLine:
		return "line"
	case MACDSignal:
		return "signal"
	case MACDHistogram:
		return "histogram"
	}
	return fmt.Sprintf("macd_component(%d)", uint8(c))
}

// MACD is Gerald Appel's Moving Average Convergence/Divergence (Appel,
// "Technical Analysis: Power Tools for Active Investors", 2005): the MACD
// line is EMA(fast) − EMA(slow) of the price, the signal line is an EMA of
// the MACD line, and the histogram is their difference (12, 26, 9
// classically). Every EMA has α = 2/(period+1) and is seeded with the
// simple mean of its first period inputs.
//
// Output: streaming.Sig(trend, value) where value is the selected
// [MACDComponent] and trend is [Bullish] (line above signal), [Bearish]
// (below) or [Neutral] (equal).
//
// Warm-up: slow + signal − 1 prices — the slow EMA needs slow prices and
// the signal EMA then needs signal MACD values; no output before.
//
// NaN and ±Inf prices are ignored: no output, state unchanged.
//
// State (TypeVersion 1): fast | slow | signal periods | component | each
// EMA's values seen, seed sum and average.
type MACD struct {
	streaming.Base
	comp               MACDComponent
	fast, slow, signal ema
}

var (
	_ streaming.Operator = (*MACD)(nil)
	_ streaming.Arity    = (*MACD)(nil)
)

// NewMACD returns a MACD with the given periods emitting comp. It panics
// unless 1 ≤ fast < slow ≤ 2^24, 1 ≤ signal ≤ 2^24 and comp is known.
func NewMACD(fast, slow, signal int, comp MACDComponent) *MACD {
	if fast < 1 || slow <= fast || slow > maxWindow || signal < 1 || signal > maxWindow {
		panic(fmt.Sprintf("fintech.NewMACD: need 1 ≤ fast < slow ≤ %d and 1 ≤ signal ≤ %d, got %d, %d, %d",
			maxWindow, maxWindow, fast, slow, signal))
	}
	if comp > MACDHistogram {
		panic(fmt.Sprintf("fintech.NewMACD: unknown %v", comp))
	}
	return &MACD{comp: comp, fast: newEMA(fast), slow: newEMA(slow), signal: newEMA(signal)}
}

// Name returns "macd".
func (*MACD) Name() string { return "macd" }

// TypeVersion returns 1.
func (*MACD) TypeVersion() uint32 { return 1 }

// Arity is exactly one input: the price.
func (*MACD) Arity() (int, int) { return 1, 1 }

// Reset forgets every price.
func (m *MACD) Reset() {
	m.fast.reset()
	m.slow.reset()
	m.signal.reset()
}

// Eval folds the price into the EMAs and emits the selected component.
func (m *MACD) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	p := in[0].Float64()
	if !finiteIn(p) {
		return streaming.NoOutput()
	}
	m.fast.push(p)
	if !m.slow.push(p) {
		return streaming.NoOutput()
	}
	line := m.fast.value - m.slow.value
	if !m.signal.push(line) {
		return streaming.NoOutput()
	}
	sig := m.signal.value
	hist := line - sig
	trend := Neutral
	if hist > 0 {
		trend = Bullish
	} else if hist < 0 {
		trend = Bearish
	}
	switch m.comp {
	case MACDSignal:
		return streaming.Sig(trend, sig)
	case MACDHistogram:
		return streaming.Sig(trend, hist)
	}
	return streaming.Sig(trend, line)
}

// Save writes: the three periods | component | the three EMA states.
func (m *MACD) Save() ([]byte, error) {
	dst := make([]byte, 0, 80)
	dst = putU(dst, uint64(m.fast.n))
	dst = putU(dst, uint64(m.slow.n))
	dst = putU(dst, uint64(m.signal.n))
	dst = putU(dst, uint64(m.comp))
	dst = m.fast.save(dst)
	dst = m.slow.save(dst)
	return m.signal.save(dst), nil
}

// Load reads a blob made by Save; it refuses one saved with other periods
// or another component.
func (m *MACD) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	f, s, g := d.Count("fast period", maxWindow), d.Count("slow period", maxWindow), d.Count("signal period", maxWindow)
	comp := MACDComponent(d.Count("component", 255))
	if d.Err == nil && (f != m.fast.n || s != m.slow.n || g != m.signal.n || comp != m.comp) {
		return mismatch(m.Name(), "periods and component", fmt.Sprint(f, "/", s, "/", g, " ", comp),
			fmt.Sprint(m.fast.n, "/", m.slow.n, "/", m.signal.n, " ", m.comp))
	}
	fast, slow, signal := m.fast.load(&d, "fast EMA"), m.slow.load(&d, "slow EMA"), m.signal.load(&d, "signal EMA")
	if d.Err == nil && (fast.seen < min(slow.seen, fast.n) || (signal.seen > 0 && !slow.ready())) {
		d.Fail("EMA warm-up counts %d/%d/%d are inconsistent", fast.seen, slow.seen, signal.seen)
	}
	if err := d.Done(m.Name()); err != nil {
		return err
	}
	m.fast, m.slow, m.signal = fast, slow, signal
	return nil
}
