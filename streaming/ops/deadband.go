package ops

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
	"math"

	"github.com/tflo-io/tflo/streaming"
)

// Deadband suppresses small changes: it emits a value only when it differs
// from the last emitted value by more than the band (|x − last| > band),
// the usual report-by-exception filter of SCADA historians.
//
// Output: Float(x) when x leaves the band around the last emitted value,
// nothing otherwise. There is no warm-up: the first valid value is always
// emitted.
//
// NaN and ±Inf inputs are refused: state unchanged, Eval returns
// streaming.Rejected(). Any finite value is taken (the state holds the
// last value only).
//
// State (TypeVersion 1): band | whether a value was emitted | last emitted.
type Deadband struct {
	streaming.Base
	band float64
	has  bool
	last float64
}

var (
	_ streaming.Operator = (*Deadband)(nil)
	_ streaming.Arity    = (*Deadband)(nil)
)

// NewDeadband returns a Deadband of the given width. It panics if band is
// negative or not finite.
func NewDeadband(band float64) *Deadband {
	if !finiteIn(band) || band < 0 {
		panic(fmt.Sprintf("ops.NewDeadband: band must be finite and not negative, got %v", band))
	}
	return &Deadband{band: band}
}

// Name returns "deadband".
func (*Deadband) Name() string { return "deadband" }

// TypeVersion returns 1.
func (*Deadband) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*Deadband) Arity() (int, int) { return 1, 1 }

// Reset forgets the last emitted value.
func (d *Deadband) Reset() { d.has, d.last = false, 0 }

// Eval emits in[0] when it leaves the band.
func (d *Deadband) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !finiteIn(x) {
		return streaming.Rejected()
	}
	if d.has && math.Abs(x-d.last) <= d.band {
		return streaming.NoOutput()
	}
	d.has, d.last = true, x
	return streaming.Float(x)
}

// Save writes: band | has | last.
func (d *Deadband) Save() ([]byte, error) {
	dst := make([]byte, 0, 17)
	dst = putF(dst, d.band)
	dst = putB(dst, d.has)
	dst = putF(dst, d.last)
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with another band.
func (d *Deadband) Load(data []byte) error {
	dec := opstate.NewDecoder(data)
	band := dec.F()
	if dec.Err == nil && band != d.band {
		return mismatch(d.Name(), "band", band, d.band)
	}
	has, last := dec.Bool(), dec.Finite("last value")
	if err := dec.Done(d.Name()); err != nil {
		return err
	}
	d.has, d.last = has, last
	return nil
}
