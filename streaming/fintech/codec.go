package fintech

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
)

// The state blobs of this package are built from unsigned varints (counts,
// sizes, indexes), single bytes (bools) and fixed 8-byte little-endian
// IEEE-754 floats (values, sums), so a blob is the same on every platform.
// Every blob starts with the operator's configuration so Load can refuse
// state saved by a node configured differently instead of silently
// misreading it.

func putU(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

func putF(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

func putB(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// decoder reads a state blob; the first error sticks and later reads
// return zero values, so Load checks err once at the end.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("truncated or overlong varint at byte %d of %d", d.off, len(d.b))
		return 0
	}
	d.off += n
	return v
}

// count reads an unsigned varint that sizes something in memory and
// refuses it when it exceeds limit, so a corrupt blob cannot make Load
// allocate without bound.
func (d *decoder) count(what string, limit uint64) int {
	v := d.u()
	if d.err == nil && v > limit {
		d.fail("%s %d exceeds %d", what, v, limit)
		return 0
	}
	return int(v)
}

func (d *decoder) f() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 8 {
		d.fail("truncated float at byte %d of %d", d.off, len(d.b))
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.off:]))
	d.off += 8
	return v
}

// finite reads a float that must be finite: state never holds NaN or ±Inf
// because every operator ignores such input.
func (d *decoder) finite(what string) float64 {
	v := d.f()
	if d.err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		d.fail("%s is %v", what, v)
	}
	return v
}

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if d.off >= len(d.b) {
		d.fail("truncated bool at byte %d of %d", d.off, len(d.b))
		return false
	}
	c := d.b[d.off]
	d.off++
	if c > 1 {
		d.fail("bool byte %d at byte %d", c, d.off-1)
	}
	return c == 1
}

// done returns the sticky error, or an error for trailing bytes, as an
// *streaming.OperatorLoadError wrapping streaming.ErrCorrupt.
func (d *decoder) done(op string) error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	if d.err != nil {
		return &streaming.OperatorLoadError{Operator: op, Reason: d.err.Error(), Err: streaming.ErrCorrupt}
	}
	return nil
}

// mismatch is the error for a blob saved by a node configured differently.
func mismatch(op, what string, saved, configured any) error {
	return &streaming.OperatorLoadError{Operator: op,
		Reason: fmt.Sprintf("state was saved with %s %v, this node is configured with %v", what, saved, configured)}
}

// finiteIn reports whether v can enter an operator's state: false for
// NaN and ±Inf (v−v is NaN for both), in one subtraction and compare.
func finiteIn(v float64) bool { return v-v == 0 }
