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
	for _, tc := range []struct {
		op    string
		raw   map[string]any
		param string
	}{
		{"macd", map[string]any{"fast": 26}, "fast"},
		{"macd", map[string]any{"component": "hist"}, "component"},
		{"ma_crossover", map[string]any{"fast": 10, "slow": 10}, "fast"},
		{"bollinger", map[string]any{"k": -0.5}, "k"},
		{"bollinger", map[string]any{"band": "top"}, "band"},
		{"vwap", map[string]any{"window": -1}, "window"},
	} {
		_, err := r.Factory(tc.op, tc.raw)
		var pe *streaming.ParamError
		require.ErrorAs(t, err, &pe, "%s %v", tc.op, tc.raw)
		require.Equal(t, tc.param, pe.Param, "%s %v: %v", tc.op, tc.raw, err)
		require.Equal(t, tc.op, pe.Operator, "%v", err)
	}
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
