package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
)

// ZScore says how unusual each value is for its key: z = (x − mean) / σ
// over the values the key had before x (mean and population standard
// deviation, kept with Welford's running update), mode Anomaly when
// |z| > threshold. It emits from the key's (minCount+1)-th value on, and
// nothing while σ is 0 (every value so far the same).
//
// NaN, ±Inf and values beyond ±1e150 (whose squares would overflow the
// variance) are refused with streaming.Rejected, the state unchanged.
//
// State (TypeVersion 1): count (uint64) | mean | m2 (float64s, big-endian).
type ZScore struct {
	streaming.Base
	threshold float64
	minCount  uint64
	n         uint64
	mean, m2  float64
}

// The modes ZScore emits.
const (
	Normal  streaming.Mode = 0
	Anomaly streaming.Mode = 1
)

// maxAbs bounds the values ZScore takes.
const maxAbs = 1e150

var (
	_ streaming.Operator = (*ZScore)(nil)
	_ streaming.Arity    = (*ZScore)(nil)
)

// ZScoreType declares ZScore for a registry: a spec names it "zscore".
var ZScoreType = streaming.OperatorType{
	Name: "zscore",
	Doc:  "How unusual a value is for its key: (x − mean) / σ over the key's earlier values (Welford's running mean and variance), an anomaly beyond a threshold.",
	Params: []streaming.Param{
		{Name: "threshold", Kind: streaming.ParamFloat, Default: 3.0, Min: streaming.Bound(0), Doc: "the |z| beyond which a value is an anomaly"},
		{Name: "min_count", Kind: streaming.ParamInt, Default: int64(10), Min: streaming.Bound(2), Doc: "earlier values a key needs before its z-scores are emitted"},
	},
	MinInputs: 1, MaxInputs: 1, Inputs: "value",
	Output:      "signal: the z-score, mode anomaly when |z| > threshold, from the key's (min_count+1)-th value on",
	Modes:       map[streaming.Mode]string{Normal: "normal", Anomaly: "anomaly"},
	TypeVersion: (*ZScore)(nil).TypeVersion(),
	New: func(p streaming.Params) (func() streaming.Operator, error) {
		threshold, minCount := p.Float("threshold"), uint64(p.Int("min_count"))
		return func() streaming.Operator { return &ZScore{threshold: threshold, minCount: minCount} }, nil
	},
}

// Name returns "zscore".
func (*ZScore) Name() string { return "zscore" }

// TypeVersion returns 1.
func (*ZScore) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*ZScore) Arity() (int, int) { return 1, 1 }

// Reset forgets the values seen.
func (z *ZScore) Reset() { z.n, z.mean, z.m2 = 0, 0, 0 }

// Eval scores in[0] against the earlier values, then counts it in.
func (z *ZScore) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if math.IsNaN(x) || math.Abs(x) > maxAbs {
		return streaming.Rejected()
	}
	out := streaming.NoOutput()
	if z.n >= z.minCount {
		if sd := math.Sqrt(z.m2 / float64(z.n)); sd > 0 {
			score := (x - z.mean) / sd
			mode := Normal
			if math.Abs(score) > z.threshold {
				mode = Anomaly
			}
			out = streaming.Sig(mode, score)
		}
	}
	z.n++
	d := x - z.mean
	z.mean += d / float64(z.n)
	z.m2 += d * (x - z.mean)
	return out
}

// Save writes count | mean | m2.
func (z *ZScore) Save() ([]byte, error) {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 24), z.n)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(z.mean))
	return binary.BigEndian.AppendUint64(b, math.Float64bits(z.m2)), nil
}

// Load reads a blob made by Save, refusing one that is not 24 bytes or
// holds a mean or m2 no run of values makes.
func (z *ZScore) Load(data []byte) error {
	if len(data) != 24 {
		return &streaming.OperatorLoadError{Operator: z.Name(), Reason: fmt.Sprintf("state of %d bytes, want 24", len(data)), Err: streaming.ErrCorrupt}
	}
	n := binary.BigEndian.Uint64(data)
	mean := math.Float64frombits(binary.BigEndian.Uint64(data[8:]))
	m2 := math.Float64frombits(binary.BigEndian.Uint64(data[16:]))
	if math.IsNaN(mean) || math.Abs(mean) > maxAbs || math.IsNaN(m2) || math.IsInf(m2, 0) || m2 < 0 {
		return &streaming.OperatorLoadError{Operator: z.Name(), Reason: fmt.Sprintf("mean %v, m2 %v out of range", mean, m2), Err: streaming.ErrCorrupt}
	}
	z.n, z.mean, z.m2 = n, mean, m2
	return nil
}
