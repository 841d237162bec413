package ops

import (
	"fmt"
	"github.com/tflo-io/tflo/streaming/internal/opstate"

	"github.com/tflo-io/tflo/streaming"
)

// RateOfChange is the slope between consecutive values in event time:
// (x − x_prev) / (ts − ts_prev) × per, where per converts the graph's time
// unit (see [Per]).
//
// Output: Float(rate) from the second valid record on. Warm-up: the first
// valid record only remembers its value and time.
//
// Records whose event time is not after the previous record's (ts ≤
// ts_prev: a duplicate or out-of-order record) are ignored: no output,
// state unchanged, so a replayed record never produces a division by zero
// or a rate backwards in time. NaN and ±Inf inputs are refused the same
// way and Eval returns streaming.Rejected(). A rate that overflows (from
// -1e308 to 1e308 in one time unit) is not emitted; the value is still
// remembered. A change beyond MaxFloat64 whose rate is finite (the same
// over ten time units) is emitted.
//
// State (TypeVersion 1): per | whether a value is held | value | its time.
type RateOfChange struct {
	streaming.Base
	per    float64
	has    bool
	prev   float64
	prevTS int64
}

var (
	_ streaming.Operator = (*RateOfChange)(nil)
	_ streaming.Arity    = (*RateOfChange)(nil)
)

type rateConfig struct{ per float64 }

// RateOption configures a RateOfChange.
type RateOption func(*rateConfig)

// Per scales the rate to "change per unit": with event time in
// nanoseconds, Per(1e9) gives change per second. Default 1: change per
// event-time unit.
func Per(unit float64) RateOption { return func(c *rateConfig) { c.per = unit } }

func defaultRateConfig() rateConfig { return rateConfig{per: 1} }

func (c rateConfig) validate() error {
	if !finiteIn(c.per) || c.per <= 0 {
		return fmt.Errorf("Per must be finite and positive, got %v", c.per)
	}
	return nil
}

// NewRateOfChange returns a RateOfChange. It panics if Per is not a
// finite positive number.
func NewRateOfChange(opts ...RateOption) *RateOfChange {
	cfg := defaultRateConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		panic("ops.NewRateOfChange: " + err.Error())
	}
	return &RateOfChange{per: cfg.per}
}

// Name returns "rate_of_change".
func (*RateOfChange) Name() string { return "rate_of_change" }

// TypeVersion returns 1.
func (*RateOfChange) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*RateOfChange) Arity() (int, int) { return 1, 1 }

// Reset forgets the previous value.
func (r *RateOfChange) Reset() { r.has, r.prev, r.prevTS = false, 0, 0 }

// Eval emits the slope from the previous valid record to this one.
func (r *RateOfChange) Eval(in []streaming.Computed, ts int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !finiteIn(x) {
		return streaming.Rejected()
	}
	if r.has && ts <= r.prevTS {
		return streaming.NoOutput()
	}
	if !r.has {
		r.has, r.prev, r.prevTS = true, x, ts
		return streaming.NoOutput()
	}
	dt := uint64(ts) - uint64(r.prevTS) // ts > prevTS: exact where ts-prevTS overflows int64
	rate := (x - r.prev) / float64(dt) * r.per
	if !finiteIn(x - r.prev) {
		// The change itself is beyond MaxFloat64 (1e308 after -1e308),
		// but over several time units or per a fraction of one the rate
		// may be finite: take the change in halves, which cannot overflow.
		rate = (x/2 - r.prev/2) / float64(dt) * r.per * 2
	}
	r.prev, r.prevTS = x, ts
	if !finiteIn(rate) { // overflow of a huge jump: report nothing rather than ±Inf
		return streaming.NoOutput()
	}
	return streaming.Float(rate)
}

// Save writes: per | has | prev | prevTS.
func (r *RateOfChange) Save() ([]byte, error) {
	dst := make([]byte, 0, 28)
	dst = putF(dst, r.per)
	dst = putB(dst, r.has)
	dst = putF(dst, r.prev)
	dst = putI(dst, r.prevTS)
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with another Per.
func (r *RateOfChange) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	per := d.F()
	if d.Err == nil && per != r.per {
		return mismatch(r.Name(), "per", per, r.per)
	}
	has, prev, prevTS := d.Bool(), d.Finite("previous value"), d.I()
	if err := d.Done(r.Name()); err != nil {
		return err
	}
	r.has, r.prev, r.prevTS = has, prev, prevTS
	return nil
}
