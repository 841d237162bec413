package fintech_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/fintech"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

// Every operator is declared, documented, builds through the registry
// with its defaults and at its parameters' bounds, and is refused just
// outside them.
func TestTypes(t *testing.T) {
	max := float64(1 << 24)
	optest.CheckTypes(t, optest.Catalog{
		Types: fintech.Types(),
		Companions: map[string]map[string]map[string]any{
			"macd":         {"fast": {"slow": max}, "slow": {"fast": 1}},
			"ma_crossover": {"fast": {"slow": max}, "slow": {"fast": 1}},
		},
	})
}

// Parameter combinations the constructors would panic on are refused by
// the registry with an error naming the parameter.
func TestRegistryRefusesImpossibleParameters(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, fintech.Register(r))
	optest.RequireParamRefusals(t, r, []optest.ParamRefusal{
		{Op: "macd", Raw: map[string]any{"fast": 26}, Param: "fast"},
		{Op: "macd", Raw: map[string]any{"component": "hist"}, Param: "component"},
		{Op: "ma_crossover", Raw: map[string]any{"fast": 10, "slow": 10}, Param: "fast"},
		{Op: "bollinger", Raw: map[string]any{"k": -0.5}, Param: "k"},
		{Op: "bollinger", Raw: map[string]any{"band": "top"}, Param: "band"},
		{Op: "vwap", Raw: map[string]any{"window": -1}, Param: "window"},
	})
}

// The registry's parameters reach the operator: a Bollinger upper band at
// K=1 over 4 prices, and a MACD histogram, built by name, emit what the
// constructors' hand-computed tables say.
func TestRegisteredParametersReachTheOperator(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, fintech.Register(r))
	run := func(name string, raw map[string]any, prices ...float64) []streaming.Computed {
		f, err := r.Factory(name, raw)
		require.NoError(t, err)
		op := f()
		var out []streaming.Computed
		for i, p := range prices {
			out = append(out, op.Eval([]streaming.Computed{streaming.Float(p)}, int64(i)))
		}
		return out
	}
	none := streaming.None()
	optest.RequireOutputs(t,
		[]streaming.Computed{none, none, none, streaming.Sig(fintech.AboveBand, 2.5+1.118033988749895)},
		run("bollinger", map[string]any{"window": 4, "k": 1, "band": "upper"}, 1, 2, 3, 4))
	optest.RequireOutputs(t,
		[]streaming.Computed{none, none, none, streaming.Sig(fintech.Bullish, 2.0/3-7.0/12), streaming.Sig(fintech.Bearish, 11.0/36-43.0/108)},
		run("macd", map[string]any{"fast": 2, "slow": 3, "signal": 2, "component": "histogram"}, 1, 2, 3, 5, 4))
}

// TestVWAPWarmupDocSaysACumulativeVWAPIgnoresIt: vwap's warm-up parameter
// is ignored by a cumulative VWAP (window 0), as the type's doc says, and
// the registry's parameter doc (starter operators) says so too. Bug: it
// gave the generic doc ("before its window first fills"), and a spec's
// window: 0 with warmup: full emitted from the first trade unannounced.
func TestVWAPWarmupDocSaysACumulativeVWAPIgnoresIt(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, fintech.Register(r))
	typ, ok := r.Lookup("vwap")
	require.True(t, ok)
	var doc string
	for _, p := range typ.Params {
		if p.Name == streaming.WarmupParamName {
			doc = p.Doc
		}
	}
	require.Contains(t, doc, "ignored with window 0")
	f, err := r.Factory("vwap", map[string]any{"window": 0, "warmup": "full"})
	require.NoError(t, err)
	optest.RequireOutputs(t, []streaming.Computed{streaming.Float(10)},
		[]streaming.Computed{f().Eval([]streaming.Computed{streaming.Float(10), streaming.Float(2)}, 0)})
}
