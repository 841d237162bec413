package ops_test

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/fintech"
	"github.com/tflo-io/tflo/streaming/internal/optest"
	"github.com/tflo-io/tflo/streaming/ops"
)

// registryCatalog is what CheckTypes needs beyond the declarations.
var registryCatalog = optest.Catalog{
	Types: ops.Types(),
	Required: map[string]map[string]any{
		"sma":             {"window": 5},
		"ema":             {"period": 5},
		"hysteresis":      {"low": 20.0, "high": 25.0},
		"threshold_cross": {"threshold": 10.0},
		"deadband":        {"band": 0.5},
		"rolling_min":     {"window": 5},
		"rolling_max":     {"window": 5},
		"median_despike":  {"window": 5, "max_dev": 2.0},
	},
	StateNames: map[string]string{"episode": "alarm_episode"},
}

// Every operator is declared, documented, builds through the registry
// with its defaults and at its parameters' bounds, and is refused just
// outside them.
func TestTypes(t *testing.T) { optest.CheckTypes(t, registryCatalog) }

// The two catalogs register into one registry: no type name is taken
// twice.
func TestCatalogNamesUnique(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, ops.Register(r))
	require.NoError(t, fintech.Register(r))
	require.Len(t, r.Types(), len(ops.Types())+len(fintech.Types()))
	require.ErrorContains(t, ops.Register(r), "already registered")
}

// Parameter combinations the constructors would panic on are refused by
// the registry with an error naming the parameter.
func TestRegistryRefusesImpossibleParameters(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, ops.Register(r))
	for _, tc := range []struct {
		op    string
		raw   map[string]any
		param string
	}{
		{"hysteresis", map[string]any{"low": 25, "high": 25}, "high"},
		{"hysteresis", map[string]any{"low": 25, "high": 20}, "high"},
		{"rate_of_change", map[string]any{"per": 0}, "per"},
		{"sma", map[string]any{"window": 0}, "window"},
		{"sma", map[string]any{}, "window"},
		{"median_despike", map[string]any{"window": 3, "max_dev": -1}, "max_dev"},
		{"threshold_cross", map[string]any{"threshold": 1, "dwell": -1}, "dwell"},
		{"threshold_cross", map[string]any{"threshold": 1, "level": "slope"}, "level"},
	} {
		_, err := r.Factory(tc.op, tc.raw)
		var pe *streaming.ParamError
		require.ErrorAs(t, err, &pe, "%s %v", tc.op, tc.raw)
		require.Equal(t, tc.param, pe.Param, "%s %v: %v", tc.op, tc.raw, err)
		require.Equal(t, tc.op, pe.Operator, "%v", err)
	}
}

// A graph built from registered types runs like one built with the
// constructors: threshold_cross with level mode and a dwell behind a
// hysteresis.
func TestRegisteredTypesInAGraph(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, ops.Register(r))
	node := func(name string, raw map[string]any) func() streaming.Operator {
		f, err := r.Factory(name, raw)
		require.NoError(t, err)
		return f
	}
	g, err := streaming.NewBuilder().Input("v").
		Node("mode", node("hysteresis", map[string]any{"low": 20, "high": 25}), "v").
		Node("alarm", node("threshold_cross", map[string]any{"threshold": 0.5, "level": "mode", "dwell": 2}), "mode").
		Build()
	require.NoError(t, err)
	in := g.NewInstance()
	var got []streaming.Computed
	for i, x := range []float64{18, 26, 22, 19, 26, 24, 23, 21, 19, 18} {
		in.Eval(int64(i), streaming.Float(x))
		got = append(got, in.Output(0))
	}
	// As TestThresholdCrossOnMode: High from ts 4 is confirmed at ts 6.
	none := streaming.None()
	optest.RequireOutputs(t, []streaming.Computed{none, none, none, none, none, none, streaming.Sig(ops.Up, 23), none, none, none}, got)
}

// State saved by the central worker's alarm-episode graph (before the
// episode operator moved here) loads into the same graph built from
// registered types and continues: testdata/central_instance_v1.hex is
// central.Graph{Window: 3, AlarmLow: 20, AlarmHigh: 25} after readings
// 30 30 30 10 10 10 30 30 30 at ts 1000..9000 (an episode closed, another
// opened at ts 9000), saved with Instance.Save.
func TestEpisodeLoadsCentralState(t *testing.T) {
	raw, err := os.ReadFile("testdata/central_instance_v1.hex")
	require.NoError(t, err)
	blob, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	require.NoError(t, err)

	r := streaming.NewRegistry()
	require.NoError(t, ops.Register(r))
	node := func(name string, raw map[string]any) func() streaming.Operator {
		f, err := r.Factory(name, raw)
		require.NoError(t, err)
		return f
	}
	g, err := streaming.NewBuilder().Input("value").
		Node("mean", node("sma", map[string]any{"window": 3}), "value").
		Node("min", node("rolling_min", map[string]any{"window": 3}), "value").
		Node("max", node("rolling_max", map[string]any{"window": 3}), "value").
		Node("alarm", node("hysteresis", map[string]any{"low": 20, "high": 25}), "mean").
		Node("alarm_episode", node("episode", nil), "alarm").
		Output("mean", "min", "max", "alarm_episode").
		Build()
	require.NoError(t, err)
	in := g.NewInstance()
	require.NoError(t, in.Load(blob))
	again, err := in.Save()
	require.NoError(t, err)
	require.Equal(t, blob, again, "the loaded state saves back unchanged")
	require.Equal(t, uint64(1), in.Operator("alarm_episode").(*ops.Episode).Closed())

	// mean (30+30+10)/3 = 23.3 stays High; (30+10+10)/3 = 16.7 falls to
	// Low at ts 11000: the episode opened at 9000 closes after 2000.
	in.Eval(10000, streaming.Float(10))
	require.True(t, in.Output(3).IsNone())
	in.Eval(11000, streaming.Float(10))
	require.Equal(t, streaming.Sig(ops.EpisodeClosed, 2000), in.Output(3))
	require.Equal(t, streaming.Float(10), in.Output(1))
	require.Equal(t, streaming.Float(30), in.Output(2))
}
