package fintech

import (
	"math"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

const huge = 1.7e308

var rejected = streaming.Rejected()

func priceRecords(ps ...float64) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = []float64{p}
	}
	return out
}

// Huge finite prices and volumes used to overflow the operators' state
// (issue 17: VWAP's Σp·v, Bollinger's m2, RSI's losses, the EMA seed sums
// of MACD and the window sums of the crossover became ±Inf, outputs
// stayed NaN, and Load refused the saved Inf). Now such an input is
// refused (Rejected, state unchanged): outputs stay finite, every saved
// state loads, and the operator continues as if the input had not come.
func TestHugeFiniteInputsKeepStateFinite(t *testing.T) {
	tests := []struct {
		name  string
		newOp func() streaming.Operator
		in    [][]float64
		want  []streaming.Computed
	}{
		{"vwap/2 p·v overflow", func() streaming.Operator { return NewVWAP(2) },
			[][]float64{{1e200, 1e200}, {10, 1}, {12, 3}, {1e300, 1e10}, {20, 0}},
			[]streaming.Computed{rejected, f(10), f(11.5), rejected, f(12)}},
		{"vwap cumulative Σp·v overflow", func() streaming.Operator { return NewVWAP(0) },
			[][]float64{{huge, 1}, {huge, 1}, {-huge, 1}},
			[]streaming.Computed{f(huge), rejected, f(0)}},
		{"rsi/2 change overflow", func() streaming.Operator { return NewRSI(2) },
			priceRecords(huge, -huge, 1, 2, 3, 2.5),
			[]streaming.Computed{rejected, rejected, none, none, f(100), f(100 * (0.5 / 0.75))}},
		{"bollinger/3 squared deviation overflow", func() streaming.Operator { return NewBollinger(3, 1, Middle) },
			priceRecords(1e200, 1, 2, -1e160, 3),
			[]streaming.Computed{rejected, none, none, rejected, streaming.Sig(AboveBand, 2)}},
		{"bollinger/2 huge K: band not emitted", func() streaming.Operator { return NewBollinger(2, 1e308, Upper) },
			priceRecords(1, 5, 5),
			[]streaming.Computed{none, none, streaming.Sig(InsideBands, 5)}},
		{"macd 2/3/2 seed sum overflow", func() streaming.Operator { return NewMACD(2, 3, 2, MACDLine) },
			priceRecords(huge, huge, 1, 2, 3, 5),
			[]streaming.Computed{rejected, rejected, none, none, none, streaming.Sig(Bullish, 2.0/3)}},
		{"ma crossover 2/3 window sum overflow", func() streaming.Operator { return NewMACrossover(2, 3) },
			priceRecords(huge, huge, 5, 4, 3, 4, 6),
			[]streaming.Computed{rejected, rejected, none, none, none, none, streaming.Sig(GoldenCross, 5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := optest.RunSaving(t, tt.newOp, tt.in)
			optest.RequireOutputs(t, tt.want, got)
			for i := range got {
				if got[i].IsRejected() != tt.want[i].IsRejected() {
					t.Fatalf("record %d: got %v (rejected %v), want rejected %v", i, got[i], got[i].IsRejected(), tt.want[i].IsRejected())
				}
			}
		})
	}
}

// NaN and ±Inf prices and negative volumes are refused with Rejected.
func TestNonFiniteInputsAreRejected(t *testing.T) {
	for _, c := range catalog {
		op := c.make()
		lo, _ := op.(streaming.Arity).Arity()
		for _, x := range []float64{nan, pinf, math.Inf(-1)} {
			in := []streaming.Computed{f(x), f(1)}
			if out := op.Eval(in[:lo], 1); !out.IsRejected() {
				t.Fatalf("%s: price %v gave %v, want Rejected", c.name, x, out)
			}
		}
	}
	if out := NewVWAP(3).Eval([]streaming.Computed{f(10), f(-1)}, 1); !out.IsRejected() {
		t.Fatalf("negative volume gave %v, want Rejected", out)
	}
}

// fuzzConfigs are the registered types with small windows (so huge values
// meet in one window) and both warm-up policies.
var fuzzConfigs = []optest.Config{
	{Type: "vwap", Params: map[string]any{"window": 0}},
	{Type: "vwap", Params: map[string]any{"window": 1}},
	{Type: "vwap", Params: map[string]any{"window": 3, "warmup": "full"}},
	{Type: "rsi", Params: map[string]any{"period": 1}},
	{Type: "rsi", Params: map[string]any{"period": 3, "warmup": "partial"}},
	{Type: "bollinger", Params: map[string]any{"window": 1, "band": "percent_b"}},
	{Type: "bollinger", Params: map[string]any{"window": 3, "k": 1e300, "band": "upper", "warmup": "partial"}},
	{Type: "bollinger", Params: map[string]any{"window": 4, "band": "lower"}},
	{Type: "macd", Params: map[string]any{"fast": 1, "slow": 2, "signal": 1}},
	{Type: "macd", Params: map[string]any{"fast": 2, "slow": 3, "signal": 4, "component": "histogram", "warmup": "partial"}},
	{Type: "ma_crossover", Params: map[string]any{"fast": 1, "slow": 2}},
	{Type: "ma_crossover", Params: map[string]any{"fast": 2, "slow": 3, "warmup": "partial"}},
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
		{100, 1, 101, 2, 99, 0, 102, 5},
		{huge, 1, huge, 1, 1, 1, 2, 1},
		{1e200, 1e200, 1e154, 1, -1e154, 1, 3e153, 2},
		{-huge, 0, huge, 1e-300, 5e-324, 1e308, 1, 1},
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
