package fintech

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
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

// trendTolerance is the histogram, relative to the price EMAs, up to which
// the MACD trend is Neutral: 2^-46 (about 1.4e-14, 64 units of rounding),
// well above the rounding of the EMAs over a flat market (a few units)
// and far below any real divergence.
const trendTolerance = 0x1p-46

// MACD is Gerald Appel's Moving Average Convergence/Divergence (Appel,
// "Technical Analysis: Power Tools for Active Investors", 2005): the MACD
// line is EMA(fast) − EMA(slow) of the price, the signal line is an EMA of
// the MACD line, and the histogram is their difference (12, 26, 9
// classically). Every EMA has α = 2/(period+1) and is seeded with the
// simple mean of its first period inputs.
//
// Output: streaming.Sig(trend, value) where value is the selected
// [MACDComponent] and trend is [Bullish] (line above signal), [Bearish]
// (below) or [Neutral] (equal, up to the rounding of the EMAs: a
// histogram within 2^-46 of the larger price EMA, as over a flat market).
//
// Warm-up: by default ([streaming.WarmupFull]) slow + signal − 1 prices —
// the slow EMA needs slow prices and the signal EMA then needs signal
// MACD values; no output before. With
// [MACD.WithWarmup](streaming.WarmupPartial) every price emits: an EMA
// still warming up counts as the mean of the inputs it has seen, and the
// signal EMA takes the MACD line from the first price on. Since that
// changes what the signal EMA has seen, the policy is saved with the
// state and a blob loads only into a node of the same policy.
//
// NaN and ±Inf prices, and prices beyond ±MaxFloat64/(4·max(slow,
// signal)) (which could overflow the EMAs' seed sums), are refused: the
// state is unchanged and Eval returns streaming.Rejected().
//
// Every EMA's seed sum is compensated and the seed is its corrected mean,
// so over a flat market every EMA is exactly the price and the line,
// signal and histogram are exactly 0.
//
// State (TypeVersion 3): fast | slow | signal periods | component |
// warm-up policy | each EMA's values seen, seed sum, seed compensation
// and average. TypeVersion 1 (no policy: full) and 2 (no compensation)
// blobs are migrated.
type MACD struct {
	streaming.Base
	comp               MACDComponent
	fast, slow, signal ema
	partial            bool
	lim                float64 // input bound: opstate.InputBound(2·max(slow, signal))
}

var (
	_ streaming.Operator = (*MACD)(nil)
	_ streaming.Arity    = (*MACD)(nil)
	_ streaming.Migrator = (*MACD)(nil)
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
	return &MACD{comp: comp, fast: newEMA(fast), slow: newEMA(slow), signal: newEMA(signal),
		lim: opstate.InputBound(2 * max(slow, signal))}
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns m. Call it before the first Eval, in the node's factory.
func (m *MACD) WithWarmup(w streaming.Warmup) *MACD {
	m.partial = w == streaming.WarmupPartial
	return m
}

// Name returns "macd".
func (*MACD) Name() string { return "macd" }

// TypeVersion returns 3.
func (*MACD) TypeVersion() uint32 { return 3 }

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
	if !(math.Abs(p) <= m.lim) {
		return streaming.Rejected()
	}
	// Update copies and commit them only if they stay finite.
	fast, slow, signal := m.fast, m.slow, m.signal
	fast.push(p)
	var line, sig float64
	var emit bool
	if m.partial {
		slow.push(p)
		line = fast.current() - slow.current()
		signal.push(line)
		sig, emit = signal.current(), true
	} else if slow.push(p) {
		line = fast.value - slow.value
		emit = signal.push(line)
		sig = signal.value
	}
	if !fast.finite() || !slow.finite() || !signal.finite() { // only after loading a blob saved before the bound existed
		return streaming.Rejected()
	}
	m.fast, m.slow, m.signal = fast, slow, signal
	if !emit {
		return streaming.NoOutput()
	}
	hist := line - sig
	trend := Neutral
	// A histogram within a few units of the EMAs' rounding of 0 is
	// Neutral: where line and signal are 0 in exact arithmetic (a market
	// that went flat after moving, the EMAs converging on the price) they
	// differ from 0 in the last bits as computed, and the trend would
	// follow the sign of that rounding.
	if tol := trendTolerance * max(math.Abs(fast.current()), math.Abs(slow.current())); hist > tol {
		trend = Bullish
	} else if hist < -tol {
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

// Save writes: the three periods | component | partial warm-up | the
// three EMA states.
func (m *MACD) Save() ([]byte, error) {
	dst := make([]byte, 0, 80)
	dst = putU(dst, uint64(m.fast.n))
	dst = putU(dst, uint64(m.slow.n))
	dst = putU(dst, uint64(m.signal.n))
	dst = putU(dst, uint64(m.comp))
	dst = putB(dst, m.partial)
	dst = m.fast.save(dst)
	dst = m.slow.save(dst)
	return m.signal.save(dst), nil
}

// Load reads a blob made by Save; it refuses one saved with other
// periods, another component or another warm-up policy.
func (m *MACD) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	f, s, g := d.Count("fast period", maxWindow), d.Count("slow period", maxWindow), d.Count("signal period", maxWindow)
	comp := MACDComponent(d.Count("component", 255))
	partial := d.Bool()
	if d.Err == nil && (f != m.fast.n || s != m.slow.n || g != m.signal.n || comp != m.comp || partial != m.partial) {
		return mismatch(m.Name(), "periods, component and warm-up", fmt.Sprint(f, "/", s, "/", g, " ", comp, " ", warmupOf(partial)),
			fmt.Sprint(m.fast.n, "/", m.slow.n, "/", m.signal.n, " ", m.comp, " ", warmupOf(m.partial)))
	}
	fast, slow, signal := m.fast.load(&d, "fast EMA"), m.slow.load(&d, "slow EMA"), m.signal.load(&d, "signal EMA")
	// Both price EMAs see every price; the signal EMA sees one line per
	// price from the slow EMA's seeding on (full) or from the first price
	// (partial).
	consistent := fast.seen == min(slow.seen, fast.n)
	if partial && !slow.ready() {
		consistent = consistent && signal.seen == min(slow.seen, signal.n)
	} else if partial {
		consistent = consistent && signal.seen >= min(slow.n, signal.n)
	} else {
		consistent = consistent && (signal.seen == 0 || slow.ready())
	}
	if d.Err == nil && !consistent {
		d.Fail("EMA warm-up counts %d/%d/%d are inconsistent", fast.seen, slow.seen, signal.seen)
	}
	if err := d.Done(m.Name()); err != nil {
		return err
	}
	m.fast, m.slow, m.signal = fast, slow, signal
	return nil
}

func warmupOf(partial bool) streaming.Warmup {
	if partial {
		return streaming.WarmupPartial
	}
	return streaming.WarmupFull
}

// MigratesFrom returns [1 2].
func (*MACD) MigratesFrom() []uint32 { return []uint32{1, 2} }

// Migrate converts a TypeVersion 1 blob (no warm-up policy, so full) to
// TypeVersion 2 by inserting the policy after the component, and a
// TypeVersion 2 blob (plain seed sums) to TypeVersion 3 by inserting a
// zero compensation after each EMA's seed sum.
func (m *MACD) Migrate(from uint32, data []byte) ([]byte, error) {
	if from != 1 && from != 2 {
		return nil, fmt.Errorf("macd: no migration from type version %d", from)
	}
	d := opstate.NewDecoder(data)
	for _, what := range []string{"fast period", "slow period", "signal period", "component"} {
		d.Count(what, maxWindow)
	}
	if d.Err != nil {
		return nil, d.Done(m.Name())
	}
	out := make([]byte, 0, len(data)+1+3*8)
	out = append(out, data[:d.Off]...)
	if from == 1 {
		out = putB(out, false)
	} else {
		start := d.Off
		d.Bool()
		out = append(out, data[start:d.Off]...)
	}
	for _, what := range []string{"fast EMA", "slow EMA", "signal EMA"} {
		start := d.Off
		d.Count(what+" values seen", maxWindow)
		d.Finite(what + " seed sum")
		if d.Err != nil {
			break
		}
		out = append(out, data[start:d.Off]...)
		out = putF(out, 0) // compensation
		start = d.Off
		d.Finite(what + " average")
		out = append(out, data[start:d.Off]...)
	}
	if err := d.Done(m.Name()); err != nil {
		return nil, err
	}
	return out, nil
}
