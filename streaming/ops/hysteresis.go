package ops

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// Hysteresis turns a value into a two-state Mode without chatter: the mode
// becomes [High] when the value reaches the high threshold (x ≥ high) and
// returns to [Low] only when it reaches the low threshold (x ≤ low). Values
// between the thresholds keep the current mode, so noise around a single
// threshold cannot flip it back and forth.
//
// Output: every valid record emits streaming.Sig(mode, x) — the mode after
// x and x itself — so downstream nodes see both the level and the state.
// There is no warm-up; the initial mode is Low.
//
// NaN and ±Inf inputs are refused: the mode is unchanged and Eval returns
// streaming.Rejected() for that record.
//
// State (TypeVersion 1): low | high | mode.
type Hysteresis struct {
	streaming.Base
	low, high float64
	mode      streaming.Mode
}

var (
	_ streaming.Operator = (*Hysteresis)(nil)
	_ streaming.Arity    = (*Hysteresis)(nil)
)

// NewHysteresis returns a Hysteresis that rises at high and falls at low.
// It panics unless low < high and both are finite.
func NewHysteresis(low, high float64) *Hysteresis {
	if !finiteIn(low) || !finiteIn(high) || !(low < high) {
		panic(fmt.Sprintf("ops.NewHysteresis: need finite low < high, got low %v, high %v", low, high))
	}
	return &Hysteresis{low: low, high: high, mode: Low}
}

// Name returns "hysteresis".
func (*Hysteresis) Name() string { return "hysteresis" }

// TypeVersion returns 1.
func (*Hysteresis) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*Hysteresis) Arity() (int, int) { return 1, 1 }

// Mode returns the current mode.
func (h *Hysteresis) Mode() streaming.Mode { return h.mode }

// Reset returns to Low.
func (h *Hysteresis) Reset() { h.mode = Low }

// Eval updates the mode with in[0] and emits Sig(mode, in[0]).
func (h *Hysteresis) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !finiteIn(x) {
		return streaming.Rejected()
	}
	switch {
	case h.mode == Low && x >= h.high:
		h.mode = High
	case h.mode == High && x <= h.low:
		h.mode = Low
	}
	return streaming.Sig(h.mode, x)
}

// Save writes: low | high | mode.
func (h *Hysteresis) Save() ([]byte, error) {
	dst := make([]byte, 0, 17)
	dst = putF(dst, h.low)
	dst = putF(dst, h.high)
	dst = putB(dst, h.mode == High)
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with other
// thresholds.
func (h *Hysteresis) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	low, high := d.F(), d.F()
	if d.Err == nil && (low != h.low || high != h.high) {
		return mismatch(h.Name(), "thresholds", [2]float64{low, high}, [2]float64{h.low, h.high})
	}
	high2 := d.Bool()
	if err := d.Done(h.Name()); err != nil {
		return err
	}
	h.mode = Low
	if high2 {
		h.mode = High
	}
	return nil
}
