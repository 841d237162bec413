package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// zscoreRef is the z-score of xs[i] from its definition, computed in two
// passes over xs[:i] (no running update): ok false before minCount
// earlier values or when they are all equal.
func zscoreRef(xs []float64, i, minCount int) (z float64, ok bool) {
	if i < minCount {
		return 0, false
	}
	mean := 0.0
	for _, x := range xs[:i] {
		mean += x
	}
	mean /= float64(i)
	v := 0.0
	for _, x := range xs[:i] {
		v += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(v / float64(i))
	if sd == 0 {
		return 0, false
	}
	return (xs[i] - mean) / sd, true
}

// graph is the spec's graph: one zscore node, resolved by a registry
// holding the catalogs and ZScoreType, as main registers it.
func graph(t *testing.T, params map[string]any) *streaming.Graph {
	t.Helper()
	reg := pipeline.NewRegistry()
	require.NoError(t, reg.Register(ZScoreType))
	f, err := reg.Factory("zscore", params)
	require.NoError(t, err)
	g, err := streaming.NewBuilder().Input("value").Node("z", f, "value").Build()
	require.NoError(t, err)
	return g
}

// TestZScoreAgainstItsDefinition: every output equals the two-pass
// z-score of the value against the key's earlier values, its mode says
// whether |z| passes the threshold, and a run saved and loaded half way
// goes on exactly like the uninterrupted one.
func TestZScoreAgainstItsDefinition(t *testing.T) {
	const minCount, threshold = 5, 2.0
	g := graph(t, map[string]any{"min_count": minCount, "threshold": threshold})
	rng := rand.New(rand.NewPCG(1, 2))
	var xs []float64
	for i := range 200 {
		x := 20 + 2*rng.NormFloat64()
		if i%37 == 36 {
			x += 15 // an outlier now and then
		}
		xs = append(xs, x)
	}

	whole, resumed := g.NewInstance(), g.NewInstance()
	anomalies := 0
	for i, x := range xs {
		if i == 100 {
			blob, err := resumed.Save()
			require.NoError(t, err)
			resumed = g.NewInstance()
			require.NoError(t, resumed.Load(blob))
		}
		whole.Eval(int64(i), streaming.Float(x))
		resumed.Eval(int64(i), streaming.Float(x))
		require.Equal(t, whole.Output(0), resumed.Output(0), "value %d after a save and load", i)
		want, ok := zscoreRef(xs, i, minCount)
		out := whole.Output(0)
		if !ok {
			require.True(t, out.IsNone(), "value %d: no z-score yet, got %v", i, out)
			continue
		}
		require.False(t, out.IsNone(), "value %d", i)
		require.InDelta(t, want, out.Float64(), 1e-9*math.Max(1, math.Abs(want)), "value %d", i)
		wantMode := Normal
		if math.Abs(want) > threshold {
			wantMode, anomalies = Anomaly, anomalies+1
		}
		require.Equal(t, wantMode, out.Mode(), "value %d (z %v)", i, want)
	}
	require.Positive(t, anomalies, "the outliers are anomalies")
}

// TestZScoreConstantKey: while every earlier value is the same (σ 0)
// there is no z-score, however many.
func TestZScoreConstantKey(t *testing.T) {
	z := &ZScore{threshold: 3, minCount: 2}
	eval := func(x float64) streaming.Computed { return z.Eval([]streaming.Computed{streaming.Float(x)}, 0) }
	for range 5 {
		require.True(t, eval(7).IsNone())
	}
	require.True(t, eval(9).IsNone(), "the first different value: the earlier ones have σ 0")
	out := eval(7) // earlier: five 7s and a 9: mean 22/3, σ √(5/9)
	require.InDelta(t, (7-22.0/3)/math.Sqrt(5.0/9), out.Float64(), 1e-12)
	require.Equal(t, Normal, out.Mode())
}

// TestZScoreRefusals: NaN, ±Inf and values past ±1e150 are refused and
// leave the state as it was; a blob of another size or a negative m2 is
// refused by Load; parameters out of range are refused by the registry.
func TestZScoreRefusals(t *testing.T) {
	z := &ZScore{threshold: 3, minCount: 2}
	for _, x := range []float64{1, 2, 3} {
		z.Eval([]streaming.Computed{streaming.Float(x)}, 0)
	}
	before, err := z.Save()
	require.NoError(t, err)
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 2e150} {
		require.True(t, z.Eval([]streaming.Computed{streaming.Float(x)}, 0).IsRejected(), "%v", x)
	}
	after, err := z.Save()
	require.NoError(t, err)
	require.Equal(t, before, after)

	require.ErrorIs(t, z.Load(before[:23]), streaming.ErrCorrupt)
	bad := append([]byte(nil), before...)
	copy(bad[16:], []byte{0xbf, 0xf0, 0, 0, 0, 0, 0, 0}) // m2 = -1
	require.ErrorContains(t, z.Load(bad), "m2 -1 out of range")

	reg := pipeline.NewRegistry()
	require.NoError(t, reg.Register(ZScoreType))
	_, err = reg.Factory("zscore", map[string]any{"min_count": 1})
	require.ErrorContains(t, err, `parameter "min_count": 1 is below the minimum 2`)
}
