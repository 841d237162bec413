package fintech

import (
	"fmt"
	"slices"

	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// Register declares every operator of the catalog in r, under the type
// names pipeline specs use ("vwap", "rsi", ...). It fails if one of the
// names is taken.
func Register(r *streaming.Registry) error {
	for _, t := range Types() {
		if err := r.Register(t); err != nil {
			return fmt.Errorf("fintech: %w", err)
		}
	}
	return nil
}

// The spec names of the bands and MACD components: their String forms,
// indexed by value.
var (
	bandNames      = names(Middle, PercentB)
	componentNames = names(MACDLine, MACDHistogram)
)

func names[T interface {
	~uint8
	fmt.Stringer
}](first, last T) []string {
	var out []string
	for v := first; v <= last; v++ {
		out = append(out, v.String())
	}
	return out
}

// Types returns the declarations of the catalog's operators: parameters
// with their defaults (the classic settings), bounds and docs, inputs,
// outputs, modes and state type versions. New of each refuses what the
// constructor would panic on, with a *streaming.ParamError naming the
// parameter.
func Types() []streaming.OperatorType {
	return []streaming.OperatorType{
		{
			Name: "vwap", Doc: "Volume-weighted average price Σ(price·volume)/Σvolume, cumulative or over the last N trades.",
			Params: []streaming.Param{
				{Name: "window", Kind: streaming.ParamInt, Default: int64(0), Min: streaming.Bound(0), Max: streaming.Bound(maxWindow),
					Doc: "number of trades averaged over; 0 for cumulative since the start (a session)"},
				vwapWarmup(),
			},
			MinInputs: 2, MaxInputs: 2, Inputs: "price, volume",
			Output:      "float: the VWAP, on every valid trade once the volume in the window is positive (with warmup: full, a rolling window waits for N trades; a trade with a negative volume is refused, as NaN and ±Inf are)",
			TypeVersion: (*VWAP)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, w := p.Int("window"), p.Warmup()
				return func() streaming.Operator { return NewVWAP(n).WithWarmup(w) }, nil
			},
		},
		{
			Name: "rsi", Doc: "Relative Strength Index with Wilder's smoothing, in [0, 100].",
			Params: []streaming.Param{
				{Name: "period", Kind: streaming.ParamInt, Default: int64(14), Min: streaming.Bound(1), Max: streaming.Bound(maxWindow),
					Doc: "number of price changes averaged (Wilder's 14)"},
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "price",
			Output:      "float: the RSI, on every valid price once period changes were seen, from the first change with warmup: partial (100 with no losses, 50 in a flat market)",
			TypeVersion: (*RSI)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, w := p.Int("period"), p.Warmup()
				return func() streaming.Operator { return NewRSI(n).WithWarmup(w) }, nil
			},
		},
		{
			Name: "bollinger", Doc: "Bollinger bands: the N-price simple moving average and K population standard deviations above and below it.",
			Params: []streaming.Param{
				{Name: "window", Kind: streaming.ParamInt, Default: int64(20), Min: streaming.Bound(1), Max: streaming.Bound(maxWindow),
					Doc: "number of prices the average and deviation cover"},
				{Name: "k", Kind: streaming.ParamFloat, Default: 2.0, Min: streaming.Bound(0),
					Doc: "the band width in standard deviations"},
				{Name: "band", Kind: streaming.ParamString, Default: "middle", Enum: bandNames,
					Doc: "the value the node emits: middle, upper, lower or percent_b ((price − lower)/(upper − lower))"},
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "price",
			Output:      "signal: the selected band, with where the price stands against the bands as the mode, on every valid price once N prices were seen (from the first with warmup: partial)",
			Modes:       map[streaming.Mode]string{AboveBand: "above", InsideBands: "inside", BelowBand: "below"},
			TypeVersion: (*Bollinger)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, k, band, w := p.Int("window"), p.Float("k"), Band(slices.Index(bandNames, p.String("band"))), p.Warmup()
				return func() streaming.Operator { return NewBollinger(n, k, band).WithWarmup(w) }, nil
			},
		},
		{
			Name: "macd", Doc: "Moving Average Convergence/Divergence: EMA(fast) − EMA(slow) of the price, its signal line (an EMA of it) and their difference.",
			Params: []streaming.Param{
				{Name: "fast", Kind: streaming.ParamInt, Default: int64(12), Min: streaming.Bound(1), Max: streaming.Bound(maxWindow - 1),
					Doc: "period of the fast EMA; below slow"},
				{Name: "slow", Kind: streaming.ParamInt, Default: int64(26), Min: streaming.Bound(2), Max: streaming.Bound(maxWindow),
					Doc: "period of the slow EMA"},
				{Name: "signal", Kind: streaming.ParamInt, Default: int64(9), Min: streaming.Bound(1), Max: streaming.Bound(maxWindow),
					Doc: "period of the signal line's EMA"},
				{Name: "component", Kind: streaming.ParamString, Default: "line", Enum: componentNames,
					Doc: "the value the node emits: line, signal or histogram (line − signal)"},
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "price",
			Output:      "signal: the selected component, with the histogram's sign as the mode, on every valid price from the (slow + signal − 1)-th on (from the first with warmup: partial)",
			Modes:       map[streaming.Mode]string{Bullish: "bullish", Neutral: "neutral", Bearish: "bearish"},
			TypeVersion: (*MACD)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				fast, slow, signal := p.Int("fast"), p.Int("slow"), p.Int("signal")
				comp := MACDComponent(slices.Index(componentNames, p.String("component")))
				if fast >= slow {
					return nil, paramErr("fast", "%d must be below slow %d", fast, slow)
				}
				w := p.Warmup()
				return func() streaming.Operator { return NewMACD(fast, slow, signal, comp).WithWarmup(w) }, nil
			},
		},
		{
			Name: "ma_crossover", Doc: "Crossings of a fast and a slow simple moving average of the price (golden and death crosses).",
			Params: []streaming.Param{
				{Name: "fast", Kind: streaming.ParamInt, Default: int64(50), Min: streaming.Bound(1), Max: streaming.Bound(maxWindow - 1),
					Doc: "number of prices of the fast average; below slow"},
				{Name: "slow", Kind: streaming.ParamInt, Default: int64(200), Min: streaming.Bound(2), Max: streaming.Bound(maxWindow),
					Doc: "number of prices of the slow average"},
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "price",
			Output:      "signal: golden or death with the fast average, only on the record where the fast average crosses the slow one",
			Modes:       map[streaming.Mode]string{GoldenCross: "golden", DeathCross: "death"},
			TypeVersion: (*MACrossover)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				fast, slow := p.Int("fast"), p.Int("slow")
				if fast >= slow {
					return nil, paramErr("fast", "%d must be below slow %d", fast, slow)
				}
				w := p.Warmup()
				return func() streaming.Operator { return NewMACrossover(fast, slow).WithWarmup(w) }, nil
			},
		},
	}
}

// vwapWarmup is vwap's warm-up parameter: its doc says that a cumulative
// VWAP ignores it, as VWAP does (a spec's window: 0 with warmup: full is
// accepted and emits from the first trade, which the generic doc, "before
// its window first fills", did not say).
func vwapWarmup() streaming.Param {
	p := streaming.WarmupParam(streaming.WarmupPartial)
	p.Doc += "; ignored with window 0 (a cumulative VWAP has no window to fill: it emits from the first trade with a positive volume)"
	return p
}

// paramErr is New's refusal of parameter name.
func paramErr(name, format string, args ...any) error { return opstate.ParamErr(name, format, args...) }
