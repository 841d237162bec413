package ops

import (
	"fmt"

	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// Register declares every operator of the catalog in r, under the type
// names pipeline specs use ("sma", "hysteresis", ...). It fails if one of
// the names is taken.
func Register(r *streaming.Registry) error {
	for _, t := range Types() {
		if err := r.Register(t); err != nil {
			return fmt.Errorf("ops: %w", err)
		}
	}
	return nil
}

// Types returns the declarations of the catalog's operators: parameters
// with their defaults, bounds and docs, inputs, outputs, modes and state
// type versions. New of each refuses what the constructor would panic on,
// with a *streaming.ParamError naming the parameter.
func Types() []streaming.OperatorType {
	return []streaming.OperatorType{
		{
			Name: "sma", Doc: "Simple moving average of the last N values.",
			Params: []streaming.Param{
				windowParam("number of values averaged", smaMaxWindow),
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the mean of the last N valid values, on every valid record once N values were seen (from the first with warmup: partial)",
			TypeVersion: (*SMA)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, w := p.Int("window"), p.Warmup()
				return func() streaming.Operator { return NewSMA(n).WithWarmup(w) }, nil
			},
		},
		{
			Name: "ema", Doc: "Exponential moving average with period N (α = 2/(N+1)), seeded with the mean of the first N values.",
			Params: []streaming.Param{
				{Name: "period", Kind: streaming.ParamInt, Doc: "the period N; the smoothing factor is 2/(N+1)",
					Min: streaming.Bound(1), Max: streaming.Bound(emaMaxPeriod)},
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the average, on every valid record from the N-th on (from the first with warmup: partial, the mean so far until the N-th)",
			TypeVersion: (*EMA)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, w := p.Int("period"), p.Warmup()
				return func() streaming.Operator { return NewEMA(n).WithWarmup(w) }, nil
			},
		},
		{
			Name: "hysteresis", Doc: "Two thresholds turn a value into a high/low mode without chatter: high from x ≥ high, low again from x ≤ low.",
			Params: []streaming.Param{
				{Name: "low", Kind: streaming.ParamFloat, Doc: "the value at or below which the mode falls back to low"},
				{Name: "high", Kind: streaming.ParamFloat, Doc: "the value at or above which the mode rises to high; must exceed low"},
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "signal: on every valid record, the mode after it and the value itself",
			Modes:       map[streaming.Mode]string{Low: "low", High: "high"},
			TypeVersion: (*Hysteresis)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				low, high := p.Float("low"), p.Float("high")
				if !(low < high) {
					return nil, paramErr("high", "%v must exceed low %v", high, low)
				}
				return func() streaming.Operator { return NewHysteresis(low, high) }, nil
			},
		},
		{
			Name: "threshold_cross", Doc: "Confirmed crossings of a threshold (at the threshold counts as below), optionally held for a minimum dwell.",
			Params: []streaming.Param{
				{Name: "threshold", Kind: streaming.ParamFloat, Doc: "the level crossed; above means strictly greater"},
				{Name: "dwell", Kind: streaming.ParamInt, Default: int64(0), Min: streaming.Bound(0),
					Doc: "event-time units the new side must hold before the crossing is reported (0: at once)"},
				{Name: "level", Kind: streaming.ParamString, Default: "value", Enum: []string{"value", "mode"},
					Doc: "what is compared with the threshold: the input's value, or its mode (0.5 behind a hysteresis confirms its mode changes)"},
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value (or a signal, with level: mode)",
			Output:      "signal: up or down with the input's value, only on the record that confirms a crossing",
			Modes:       map[streaming.Mode]string{Up: "up", Down: "down"},
			TypeVersion: (*ThresholdCross)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				th, dwell, onMode := p.Float("threshold"), int64(p.Int("dwell")), p.String("level") == "mode"
				return func() streaming.Operator {
					opts := []CrossOption{WithDwell(dwell)}
					if onMode {
						opts = append(opts, OnMode())
					}
					return NewThresholdCross(th, opts...)
				}, nil
			},
		},
		{
			Name: "deadband", Doc: "Report by exception: passes a value only when it differs from the last one passed by more than the band.",
			Params: []streaming.Param{
				{Name: "band", Kind: streaming.ParamFloat, Min: streaming.Bound(0), Doc: "the change, strictly exceeded, that is reported"},
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the value, on the first valid record and whenever it leaves the band around the last value passed",
			TypeVersion: (*Deadband)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				band := p.Float("band")
				return func() streaming.Operator { return NewDeadband(band) }, nil
			},
		},
		{
			Name: "rate_of_change", Doc: "Slope between consecutive valid records: (x − x_prev) / (ts − ts_prev) × per.",
			Params: []streaming.Param{
				{Name: "per", Kind: streaming.ParamFloat, Default: 1.0,
					Doc: "event-time units the rate is expressed per, above 0 (1000 with millisecond event times: change per second)"},
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the rate, from the second valid record on (records not later than the previous one are ignored)",
			TypeVersion: (*RateOfChange)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				per := p.Float("per")
				if per <= 0 {
					return nil, paramErr("per", "%v must be above 0", per)
				}
				return func() streaming.Operator { return NewRateOfChange(Per(per)) }, nil
			},
		},
		{
			Name: "rolling_min", Doc: "Minimum of the last N values (monotonic deque, O(1) amortised).",
			Params: []streaming.Param{
				windowParam("number of values the minimum is taken over", smaMaxWindow),
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the minimum of the last N valid values, on every valid record once N values were seen (from the first with warmup: partial)",
			TypeVersion: (&RollingMin{}).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, w := p.Int("window"), p.Warmup()
				return func() streaming.Operator { return NewRollingMin(n).WithWarmup(w) }, nil
			},
		},
		{
			Name: "rolling_max", Doc: "Maximum of the last N values (monotonic deque, O(1) amortised).",
			Params: []streaming.Param{
				windowParam("number of values the maximum is taken over", smaMaxWindow),
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the maximum of the last N valid values, on every valid record once N values were seen (from the first with warmup: partial)",
			TypeVersion: (&RollingMax{}).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, w := p.Int("window"), p.Warmup()
				return func() streaming.Operator { return NewRollingMax(n).WithWarmup(w) }, nil
			},
		},
		{
			Name: "median_despike", Doc: "Replaces a value further than max_dev from the median of the last N values by that median.",
			Params: []streaming.Param{
				windowParam("number of raw values the median is taken over", despikeMaxWindow),
				{Name: "max_dev", Kind: streaming.ParamFloat, Min: streaming.Bound(0),
					Doc: "the largest distance from the median a value may have and still pass unchanged"},
				streaming.WarmupParam(streaming.WarmupFull),
			},
			MinInputs: 1, MaxInputs: 1, Inputs: "value",
			Output:      "float: the value, or the window median when it is a spike, on every valid record once N values were seen (from the first with warmup: partial)",
			TypeVersion: (*MedianDespike)(nil).TypeVersion(),
			New: func(p streaming.Params) (func() streaming.Operator, error) {
				n, dev, w := p.Int("window"), p.Float("max_dev"), p.Warmup()
				return func() streaming.Operator { return NewMedianDespike(n, dev).WithWarmup(w) }, nil
			},
		},
		{
			Name: "episode", Doc: "Turns a mode into episodes: opened when the input's mode becomes 1 (hysteresis high, threshold_cross up), closed with its duration when it leaves 1. Its state name is alarm_episode.",
			MinInputs: 1, MaxInputs: 1, Inputs: "a signal (a hysteresis or threshold_cross output)",
			Output:      "signal: opened (value 0) on the record the mode becomes 1, closed (value: the duration in event-time units, 0 when that record is stamped before the opening one) on the record it leaves 1; nothing otherwise",
			Modes:       map[streaming.Mode]string{EpisodeOpened: "opened", EpisodeClosed: "closed"},
			TypeVersion: (*Episode)(nil).TypeVersion(),
			New: func(streaming.Params) (func() streaming.Operator, error) {
				return func() streaming.Operator { return NewEpisode() }, nil
			},
		},
	}
}

// windowParam declares the required "window" parameter, 1..max values.
func windowParam(doc string, max int) streaming.Param {
	return streaming.Param{Name: "window", Kind: streaming.ParamInt, Doc: doc,
		Min: streaming.Bound(1), Max: streaming.Bound(float64(max))}
}

// paramErr is New's refusal of parameter name.
func paramErr(name, format string, args ...any) error { return opstate.ParamErr(name, format, args...) }
