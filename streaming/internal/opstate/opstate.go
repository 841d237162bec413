package opstate

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
)

// PutU appends an unsigned varint.
func PutU(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// PutI appends a signed varint.
func PutI(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// PutF appends a float as 8 little-endian bytes.
func PutF(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

// PutB appends a bool as one byte.
func PutB(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Decoder reads a state blob; the first error sticks and later reads
// return zero values, so Load checks Err (or Done) once at the end.
type Decoder struct {
	B   []byte
	Off int
	Err error
}

// NewDecoder returns a decoder over b (not retained beyond the Load).
func NewDecoder(b []byte) Decoder { return Decoder{B: b} }

// Fail records the first error.
func (d *Decoder) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf(format, args...)
	}
}

// U reads an unsigned varint.
func (d *Decoder) U() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B[d.Off:])
	if n <= 0 {
		d.Fail("truncated or overlong varint at byte %d of %d", d.Off, len(d.B))
		return 0
	}
	d.Off += n
	return v
}

// Count reads an unsigned varint that sizes something in memory and
// refuses it when it exceeds limit, so a corrupt blob cannot make Load
// allocate without bound.
func (d *Decoder) Count(what string, limit uint64) int {
	v := d.U()
	if d.Err == nil && v > limit {
		d.Fail("%s %d exceeds %d", what, v, limit)
		return 0
	}
	return int(v)
}

// I reads a signed varint.
func (d *Decoder) I() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B[d.Off:])
	if n <= 0 {
		d.Fail("truncated or overlong varint at byte %d of %d", d.Off, len(d.B))
		return 0
	}
	d.Off += n
	return v
}

// F reads an 8-byte float.
func (d *Decoder) F() float64 {
	if d.Err != nil {
		return 0
	}
	if len(d.B)-d.Off < 8 {
		d.Fail("truncated float at byte %d of %d", d.Off, len(d.B))
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.B[d.Off:]))
	d.Off += 8
	return v
}

// Finite reads a float that must be finite: state never holds NaN or ±Inf
// because every operator ignores such input.
func (d *Decoder) Finite(what string) float64 {
	v := d.F()
	if d.Err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		d.Fail("%s is %v", what, v)
	}
	return v
}

// Bounded reads a float whose magnitude is at most lim: state an
// operator's input bound admitted (see InputBound). NaN and ±Inf fail.
func (d *Decoder) Bounded(what string, lim float64) float64 {
	v := d.F()
	if d.Err == nil && !(math.Abs(v) <= lim) {
		d.Fail("%s %v is beyond the input bound ±%v", what, v, lim)
	}
	return v
}

// Bool reads a one-byte bool (0 or 1).
func (d *Decoder) Bool() bool {
	if d.Err != nil {
		return false
	}
	if d.Off >= len(d.B) {
		d.Fail("truncated bool at byte %d of %d", d.Off, len(d.B))
		return false
	}
	c := d.B[d.Off]
	d.Off++
	if c > 1 {
		d.Fail("bool byte %d at byte %d", c, d.Off-1)
	}
	return c == 1
}

// Done returns the sticky error, or an error for trailing bytes, as an
// *streaming.OperatorLoadError of operator op wrapping streaming.ErrCorrupt.
func (d *Decoder) Done(op string) error {
	if d.Err == nil && d.Off != len(d.B) {
		d.Fail("%d trailing bytes", len(d.B)-d.Off)
	}
	if d.Err != nil {
		return &streaming.OperatorLoadError{Operator: op, Reason: d.Err.Error(), Err: streaming.ErrCorrupt}
	}
	return nil
}

// Mismatch is the error for a blob saved by a node configured differently.
func Mismatch(op, what string, saved, configured any) error {
	return &streaming.OperatorLoadError{Operator: op,
		Reason: fmt.Sprintf("state was saved with %s %v, this node is configured with %v", what, saved, configured)}
}

// ParamErr is an OperatorType.New refusal of parameter name; the
// registry adds the operator type to it.
func ParamErr(name, format string, args ...any) error {
	return &streaming.ParamError{Param: name, Reason: fmt.Sprintf(format, args...)}
}

// InputBound returns the largest input magnitude an operator may take
// when terms of up to terms such inputs are added up in its state (a
// window sum of N values: terms N). It is MaxFloat64/(2·terms): any sum
// of that many admitted values, and any difference of two such sums,
// stays finite with a factor-2 margin for rounding, so an operator that
// refuses inputs beyond it never overflows however its window slides.
// Comparing |x| <= bound also refuses NaN and ±Inf.
func InputBound(terms int) float64 { return math.MaxFloat64 / 2 / float64(max(terms, 1)) }

// FiniteIn reports whether v can enter an operator's state: false for NaN
// and ±Inf (v−v is NaN for both), in one subtraction and compare.
func FiniteIn(v float64) bool { return v-v == 0 }

// KSum is a running sum with Neumaier compensation: adding and removing
// values for ever (a sliding window) keeps the error of a single addition
// instead of accumulating one rounding error per event.
type KSum struct {
	Sum, Comp float64
}

// Add adds x.
func (s *KSum) Add(x float64) {
	t := s.Sum + x
	if math.Abs(s.Sum) >= math.Abs(x) {
		s.Comp += (s.Sum - t) + x
	} else {
		s.Comp += (x - t) + s.Sum
	}
	s.Sum = t
}

// CancelBound: when the value leaving a sliding window's KSum is more than
// this many times the sum that stays, the sum's rounding (relative to the
// value that left) may be all that is left of it, and the window sums its
// values afresh instead.
const CancelBound = 1 << 20

// Value is the compensated sum.
func (s *KSum) Value() float64 { return s.Sum + s.Comp }

// Mean is the compensated sum divided by n, corrected by the residual of
// that division: Value()/n rounds twice (0.1 three times sums to
// 0.30000000000000004, and that over 3 is 0.10000000000000002), while the
// residual Sum − mean·n (exact, by FMA) plus Comp is what the first
// quotient missed, so n equal values average to that value exactly.
func (s *KSum) Mean(n int) float64 {
	fn := float64(n)
	m := (s.Sum + s.Comp) / fn
	r := math.FMA(-m, fn, s.Sum) + s.Comp
	if c := m + r/fn; FiniteIn(c) {
		return c
	}
	return m
}

// Ratio is num's value over den's, corrected by the residual of the
// division as Mean is: two sums of one ratio to each other (Σp·v over Σv
// of a flat price) give that ratio, not it off by the rounding of their
// values. den's value must not be 0.
func Ratio(num, den KSum) float64 {
	d := den.Sum + den.Comp
	r := (num.Sum + num.Comp) / d
	res := math.FMA(-r, den.Sum, num.Sum) + num.Comp - r*den.Comp
	if c := r + res/d; FiniteIn(c) {
		return c
	}
	return r
}

// Finite reports whether the sum, its compensation and its value are all
// finite: a running sum that may take any number of inputs (a cumulative
// VWAP) adds into a copy and keeps it only if this holds.
func (s KSum) Finite() bool { return FiniteIn(s.Sum) && FiniteIn(s.Comp) && FiniteIn(s.Sum+s.Comp) }
