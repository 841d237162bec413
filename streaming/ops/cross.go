package ops

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// ThresholdCross detects confirmed crossings of a threshold. A value is
// "above" when level > threshold and "below" otherwise (at the threshold
// counts as below).
//
// Output: streaming.Sig([Up], x) when the level crosses from below to
// above, streaming.Sig([Down], x) from above to below, and nothing on every
// other record. x is the input's value (Computed.Float64).
//
// Dwell (see [WithDwell]): with a minimum dwell d > 0 in event-time units,
// a crossing is only confirmed by a record at least d after the first
// record on the new side, with no record back on the old side in between;
// it is reported on that confirming record. A brief excursion shorter
// than d is no crossing at all. With d = 0 (the default) every crossing is
// reported on the record that crosses.
//
// Level (see [OnMode]): by default the level is the input's value; with
// OnMode it is the input's Mode, so a ThresholdCross at 0.5 behind a
// Hysteresis reports confirmed Low→High and High→Low transitions.
//
// Warm-up: the first valid record only establishes the side and never
// emits.
//
// NaN and ±Inf inputs are refused: state unchanged (a pending crossing
// stays pending), Eval returns streaming.Rejected(). No input magnitude
// can overflow the state, which holds no sums.
//
// State (TypeVersion 1): threshold | dwell | on-mode | whether a side is
// known | side | whether a crossing is pending | its first event time.
type ThresholdCross struct {
	streaming.Base
	cfg     crossConfig
	known   bool
	above   bool  // confirmed side
	pending bool  // the level has been on the other side since `since`
	since   int64 // event time of the first record on the other side
}

var (
	_ streaming.Operator = (*ThresholdCross)(nil)
	_ streaming.Arity    = (*ThresholdCross)(nil)
)

type crossConfig struct {
	threshold float64
	dwell     int64
	onMode    bool
}

// CrossOption configures a ThresholdCross.
type CrossOption func(*crossConfig)

// WithDwell sets the minimum dwell, in the graph's event-time units, a new
// side must hold before a crossing is confirmed. Default 0: no dwell.
func WithDwell(d int64) CrossOption { return func(c *crossConfig) { c.dwell = d } }

// OnMode makes the level the input's Mode (as a float) instead of its
// value. Default: the value.
func OnMode() CrossOption { return func(c *crossConfig) { c.onMode = true } }

func defaultCrossConfig(threshold float64) crossConfig {
	return crossConfig{threshold: threshold}
}

func (c crossConfig) validate() error {
	if !finiteIn(c.threshold) {
		return fmt.Errorf("threshold must be finite, got %v", c.threshold)
	}
	if c.dwell < 0 {
		return fmt.Errorf("dwell must not be negative, got %d", c.dwell)
	}
	return nil
}

// NewThresholdCross returns a crossing detector for threshold. It panics
// if the threshold is not finite or the dwell is negative.
func NewThresholdCross(threshold float64, opts ...CrossOption) *ThresholdCross {
	cfg := defaultCrossConfig(threshold)
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		panic("ops.NewThresholdCross: " + err.Error())
	}
	return &ThresholdCross{cfg: cfg}
}

// Name returns "threshold_cross".
func (*ThresholdCross) Name() string { return "threshold_cross" }

// TypeVersion returns 1.
func (*ThresholdCross) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*ThresholdCross) Arity() (int, int) { return 1, 1 }

// Reset forgets the side and any pending crossing.
func (t *ThresholdCross) Reset() { t.known, t.above, t.pending, t.since = false, false, false, 0 }

// Eval classifies in[0] and emits a signal when a crossing is confirmed.
func (t *ThresholdCross) Eval(in []streaming.Computed, ts int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !finiteIn(x) {
		return streaming.Rejected()
	}
	level := x
	if t.cfg.onMode {
		level = float64(in[0].Mode())
	}
	above := level > t.cfg.threshold
	if !t.known {
		t.known, t.above = true, above
		return streaming.NoOutput()
	}
	if above == t.above {
		t.pending = false
		return streaming.NoOutput()
	}
	if !t.pending {
		t.pending, t.since = true, ts
	}
	// The time held as a uint64: exact where ts − since overflows int64
	// (event times more than 2^63 apart), as in RateOfChange. A record
	// earlier than the first on the new side confirms nothing.
	if ts < t.since || uint64(ts)-uint64(t.since) < uint64(t.cfg.dwell) {
		return streaming.NoOutput()
	}
	t.above, t.pending = above, false
	if above {
		return streaming.Sig(Up, x)
	}
	return streaming.Sig(Down, x)
}

// Save writes: threshold | dwell | on-mode | known | above | pending | since.
func (t *ThresholdCross) Save() ([]byte, error) {
	dst := make([]byte, 0, 32)
	dst = putF(dst, t.cfg.threshold)
	dst = putI(dst, t.cfg.dwell)
	dst = putB(dst, t.cfg.onMode)
	dst = putB(dst, t.known)
	dst = putB(dst, t.above)
	dst = putB(dst, t.pending)
	dst = putI(dst, t.since)
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with another
// threshold, dwell or level source.
func (t *ThresholdCross) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	cfg := crossConfig{threshold: d.F(), dwell: d.I(), onMode: d.Bool()}
	if d.Err == nil && cfg != t.cfg {
		return mismatch(t.Name(), "configuration", fmt.Sprintf("%+v", cfg), fmt.Sprintf("%+v", t.cfg))
	}
	known, above, pending, since := d.Bool(), d.Bool(), d.Bool(), d.I()
	if err := d.Done(t.Name()); err != nil {
		return err
	}
	t.known, t.above, t.pending, t.since = known, above, pending, since
	return nil
}
