package streaming_test

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/tflo-io/tflo/streaming"
)

// sum is a stateful test operator: running sum of its first input.
type sum struct {
	streaming.Base
	total float64
	ver   uint32
}

func (s *sum) Name() string        { return "sum" }
func (s *sum) TypeVersion() uint32 { return s.ver }
func (s *sum) Arity() (int, int)   { return 1, 1 }
func (s *sum) Reset()              { s.total = 0 }
func (s *sum) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	s.total += in[0].Float64()
	return streaming.Float(s.total)
}
func (s *sum) Save() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, math.Float64bits(s.total)), nil
}
func (s *sum) Load(b []byte) error {
	if len(b) != 8 {
		return &streaming.OperatorLoadError{Operator: "sum", Reason: "want 8 bytes"}
	}
	s.total = math.Float64frombits(binary.LittleEndian.Uint64(b))
	return nil
}

// migratingSum is sum at type version 2, whose v1 blob stored the total as
// an int64 of hundredths.
type migratingSum struct{ sum }

func (m *migratingSum) TypeVersion() uint32    { return 2 }
func (m *migratingSum) MigratesFrom() []uint32 { return []uint32{1} }
func (m *migratingSum) Migrate(from uint32, b []byte) ([]byte, error) {
	if from != 1 || len(b) != 8 {
		return nil, errors.New("bad v1 blob")
	}
	cents := int64(binary.LittleEndian.Uint64(b))
	return binary.LittleEndian.AppendUint64(nil, math.Float64bits(float64(cents)/100)), nil
}

// add is a stateless two-input operator.
type add struct{ streaming.StatelessBase }

func (add) Name() string      { return "add" }
func (add) Arity() (int, int) { return 2, 2 }
func (add) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	return streaming.Float(in[0].Float64() + in[1].Float64())
}

// positive emits its input only when it is above zero.
type positive struct{ streaming.StatelessBase }

func (positive) Name() string { return "positive" }
func (positive) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	if v := in[0].Float64(); v > 0 {
		return streaming.Float(v)
	}
	return streaming.NoOutput()
}

// counter counts the records it sees, including partial ones.
type counter struct {
	streaming.Base
	n int64
}

func (c *counter) Name() string          { return "counter" }
func (c *counter) AcceptsPartialInputs() {}
func (c *counter) Reset()                { c.n = 0 }
func (c *counter) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	c.n++
	return streaming.Int(c.n)
}
func (c *counter) Save() ([]byte, error) { return binary.AppendVarint(nil, c.n), nil }
func (c *counter) Load(b []byte) error {
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return &streaming.OperatorLoadError{Operator: "counter", Reason: "bad varint"}
	}
	c.n = v
	return nil
}

func newSum() streaming.Operator     { return &sum{ver: 1} }
func newAdd() streaming.Operator     { return add{} }
func newPos() streaming.Operator     { return positive{} }
func newCounter() streaming.Operator { return &counter{} }

// finite rejects NaN and ±Inf and passes every other value.
type finite struct{ streaming.StatelessBase }

func (finite) Name() string { return "finite" }
func (finite) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	if v := in[0].Float64(); v-v != 0 {
		return streaming.Rejected()
	}
	return in[0]
}
