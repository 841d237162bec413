package streaming

import (
	"math"
	"strconv"
)

// Kind says which variant a Computed holds.
type Kind uint8

// The kinds of Computed values.
const (
	KindNone   Kind = iota // no value: the node did not emit for this record
	KindFloat              // float64
	KindInt                // int64
	KindBool               // bool
	KindSignal             // a float64 value tagged with a Mode
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindFloat:
		return "float"
	case KindInt:
		return "int"
	case KindBool:
		return "bool"
	case KindSignal:
		return "signal"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Mode is the discrete state a signal carries (for example Low/High of a
// hysteresis, Up/Down of a threshold cross). Catalogs define their own
// constants; zero is conventionally the "normal" or "low" mode.
type Mode int32

// Computed is the value on a graph edge. It is a small value type (16 bytes)
// so that passing it between operators costs no allocation. The zero value
// is None.
type Computed struct {
	bits uint64
	mode Mode
	kind Kind
}

// None is the absent value: a node that did not emit for this record.
func None() Computed { return Computed{} }

// Float returns a float Computed.
func Float(v float64) Computed { return Computed{bits: math.Float64bits(v), kind: KindFloat} }

// Int returns an int Computed.
func Int(v int64) Computed { return Computed{bits: uint64(v), kind: KindInt} }

// Bool returns a bool Computed.
func Bool(v bool) Computed {
	var b uint64
	if v {
		b = 1
	}
	return Computed{bits: b, kind: KindBool}
}

// Sig returns a signal Computed: a value tagged with a mode.
func Sig(m Mode, v float64) Computed {
	return Computed{bits: math.Float64bits(v), mode: m, kind: KindSignal}
}

// Kind reports which variant c holds.
func (c Computed) Kind() Kind { return c.kind }

// IsNone reports whether c is the absent value.
func (c Computed) IsNone() bool { return c.kind == KindNone }

// Float64 returns c as a float64: floats and signals as stored, ints
// converted, bools as 0 or 1, None as NaN.
func (c Computed) Float64() float64 {
	switch c.kind {
	case KindFloat, KindSignal:
		return math.Float64frombits(c.bits)
	case KindInt:
		return float64(int64(c.bits))
	case KindBool:
		return float64(c.bits)
	}
	return math.NaN()
}

// Int64 returns c as an int64: ints as stored, floats and signals truncated
// toward zero, bools as 0 or 1, None as 0.
func (c Computed) Int64() int64 {
	switch c.kind {
	case KindInt:
		return int64(c.bits)
	case KindFloat, KindSignal:
		return int64(math.Float64frombits(c.bits))
	case KindBool:
		return int64(c.bits)
	}
	return 0
}

// Truth returns c as a bool: bools as stored, numbers as non-zero, signals
// as a non-zero mode, None as false.
func (c Computed) Truth() bool {
	switch c.kind {
	case KindBool, KindInt:
		return c.bits != 0
	case KindFloat:
		return math.Float64frombits(c.bits) != 0
	case KindSignal:
		return c.mode != 0
	}
	return false
}

// Mode returns the mode of a signal, and 0 for every other kind.
func (c Computed) Mode() Mode {
	if c.kind == KindSignal {
		return c.mode
	}
	return 0
}

// String formats c for logs and test failures.
func (c Computed) String() string {
	switch c.kind {
	case KindFloat:
		return strconv.FormatFloat(c.Float64(), 'g', -1, 64)
	case KindInt:
		return strconv.FormatInt(c.Int64(), 10)
	case KindBool:
		return strconv.FormatBool(c.Truth())
	case KindSignal:
		return "sig(" + strconv.Itoa(int(c.mode)) + "," + strconv.FormatFloat(c.Float64(), 'g', -1, 64) + ")"
	}
	return "none"
}

// NodeOutput is what an operator returns for one record: a value, or
// nothing (Computed.IsNone) when the operator does not emit — during
// warm-up, on NaN input, or when no event happened (no threshold cross).
// Downstream nodes are skipped for a record when any of their inputs did
// not emit, unless they implement [PartialInputs].
type NodeOutput = Computed

// Emit is shorthand for returning a value from Eval; it reads better than
// returning a bare Computed in operator code.
func Emit(c Computed) NodeOutput { return c }

// NoOutput is returned by Eval when the operator has nothing to emit.
func NoOutput() NodeOutput { return Computed{} }

// rejectedBits marks a None as Rejected (a plain None has zero bits).
const rejectedBits = 1

// Rejected is returned by Eval when the operator refuses the record's
// input: it is NaN or ±Inf, or so large that taking it in would make the
// operator's state non-finite (an overflowing window sum). The operator
// leaves its state unchanged. Downstream it is None like NoOutput;
// Instance.Eval counts it (see Instance.Rejected) so the runtime can
// report refused records, and stores a plain None in its place.
func Rejected() NodeOutput { return Computed{bits: rejectedBits} }

// IsRejected reports whether c is the Rejected marker (an operator's
// direct return value; Instance outputs never hold it).
func (c Computed) IsRejected() bool { return c.kind == KindNone && c.bits == rejectedBits }
