package ops

import (
	"math"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

const huge = 1.7e308

var rejected = streaming.Rejected()

func records(xs ...float64) [][]float64 {
	out := make([][]float64, len(xs))
	for i, x := range xs {
		out[i] = []float64{x}
	}
	return out
}

// Huge finite inputs used to overflow an operator's state (issue 17:
// SMA's running sum became Inf, the mean stayed NaN after the values left
// the window, and Load refused the Inf the checkpoint saved). Now such an
// input is refused (Rejected, state unchanged): outputs stay finite,
// every saved state loads, and the operator continues as if the input had
// not come.
func TestHugeFiniteInputsKeepStateFinite(t *testing.T) {
	tests := []struct {
		name  string
		newOp func() streaming.Operator
		in    []float64
		want  []streaming.Computed
	}{
		{"sma/3 running sum", func() streaming.Operator { return NewSMA(3) },
			[]float64{huge, huge, 1, 2, 3, 4}, []streaming.Computed{rejected, rejected, none, none, f(2), f(3)}},
		// Within the bound MaxFloat64/6 of an SMA of 3, opposite values
		// leave the window without overflowing the sum.
		{"sma/3 at the bound", func() streaming.Operator { return NewSMA(3) },
			[]float64{-2.9e307, 2.9e307, 2.9e307, 0, 0, 0}, []streaming.Computed{none, none, f(2.9e307 / 3), f(5.8e307 / 3), f(2.9e307 / 3), f(0)}},
		{"sma/2 partial", func() streaming.Operator { return NewSMA(2).WithWarmup(streaming.WarmupPartial) },
			[]float64{huge, 1, -huge, 3}, []streaming.Computed{rejected, f(1), rejected, f(2)}},
		{"ema/2 seed sum", func() streaming.Operator { return NewEMA(2) },
			[]float64{huge, huge, 1, 2, 3}, []streaming.Computed{rejected, rejected, none, f(1.5), f(1.5 + 2.0/3*1.5)}},
		{"median_despike/2 even median", func() streaming.Operator { return NewMedianDespike(2, 1) },
			[]float64{huge, huge, -huge, 5}, []streaming.Computed{none, f(huge), f(0), f(-huge / 2)}},
		{"rate_of_change overflowing rate", func() streaming.Operator { return NewRateOfChange() },
			[]float64{-huge, huge, 1, 3}, []streaming.Computed{none, none, f(1 - huge), f(2)}},
		{"rolling_max keeps any finite value", func() streaming.Operator { return NewRollingMax(2) },
			[]float64{huge, -huge, 1}, []streaming.Computed{none, f(huge), f(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := optest.RunSaving(t, tt.newOp, records(tt.in...))
			optest.RequireOutputs(t, tt.want, got)
			for i := range got {
				if got[i].IsRejected() != tt.want[i].IsRejected() {
					t.Fatalf("record %d: got %v (rejected %v), want rejected %v", i, got[i], got[i].IsRejected(), tt.want[i].IsRejected())
				}
			}
		})
	}
}

// NaN and ±Inf inputs are refused by every operator with Rejected, which
// a graph counts per record.
func TestNonFiniteInputsAreRejected(t *testing.T) {
	for _, c := range catalog {
		op := c.make()
		for _, x := range []float64{nan, pinf, ninf} {
			if out := op.Eval([]streaming.Computed{f(x)}, 1); !out.IsRejected() {
				t.Fatalf("%s: input %v gave %v, want Rejected", c.name, x, out)
			}
		}
	}
	g, err := streaming.NewBuilder().Input("v").
		Node("sma", func() streaming.Operator { return NewSMA(2) }, "v").
		Node("max", func() streaming.Operator { return NewRollingMax(2) }, "v").
		Build()
	if err != nil {
		t.Fatal(err)
	}
	in := g.NewInstance()
	in.Eval(0, f(huge))
	if in.Rejected() != 1 {
		t.Fatalf("1.7e308: %d nodes rejected, want 1 (the SMA; the rolling max takes it)", in.Rejected())
	}
	in.Eval(1, f(math.NaN()))
	if in.Rejected() != 2 {
		t.Fatalf("NaN: %d nodes rejected, want 2", in.Rejected())
	}
}

// fuzzConfigs are the registered types with small windows (so huge values
// meet in one window) and both warm-up policies.
var fuzzConfigs = []optest.Config{
	{Type: "sma", Params: map[string]any{"window": 1}},
	{Type: "sma", Params: map[string]any{"window": 3}},
	{Type: "sma", Params: map[string]any{"window": 4, "warmup": "partial"}},
	{Type: "ema", Params: map[string]any{"period": 1}},
	{Type: "ema", Params: map[string]any{"period": 3, "warmup": "partial"}},
	{Type: "hysteresis", Params: map[string]any{"low": -1e300, "high": 1e300}},
	{Type: "threshold_cross", Params: map[string]any{"threshold": 0, "dwell": 2}},
	{Type: "deadband", Params: map[string]any{"band": 1e307}},
	{Type: "rate_of_change", Params: map[string]any{"per": 1e300}},
	{Type: "rolling_min", Params: map[string]any{"window": 3, "warmup": "partial"}},
	{Type: "rolling_max", Params: map[string]any{"window": 2}},
	{Type: "median_despike", Params: map[string]any{"window": 2, "max_dev": 1}},
	{Type: "median_despike", Params: map[string]any{"window": 3, "max_dev": 0, "warmup": "partial"}},
	{Type: "episode", Params: nil},
}

// FuzzFiniteInputs feeds finite values of any magnitude to every
// registered operator, saving and reloading after every record: outputs
// stay None or finite, Load accepts everything Save wrote, and the
// reloaded operator emits what an uninterrupted one does.
func FuzzFiniteInputs(f *testing.F) {
	r := streaming.NewRegistry()
	if err := Register(r); err != nil {
		f.Fatal(err)
	}
	seeded := map[string]bool{}
	for _, c := range fuzzConfigs {
		seeded[c.Type] = true
	}
	for _, typ := range r.Types() {
		if !seeded[typ.Name] {
			f.Fatalf("type %q has no fuzz configuration", typ.Name)
		}
	}
	for _, seed := range [][]float64{
		{1, 2, 3, 4, 5},
		{huge, huge, 1, 2, 3},
		{-huge, huge, huge, -huge, 0},
		{1e154, 1e155, 1e200, 1e-300, 5e-324},
	} {
		var b []byte
		for _, v := range seed {
			bits := math.Float64bits(v)
			for i := range 8 {
				b = append(b, byte(bits>>(8*i)))
			}
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		optest.CheckFiniteInputs(t, r, fuzzConfigs, optest.FuzzFloats(data))
	})
}
