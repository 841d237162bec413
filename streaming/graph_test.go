package streaming_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

func TestBuildRejectsBadWiring(t *testing.T) {
	cases := []struct {
		name     string
		build    func() *streaming.Builder
		wantNode string
		wantMsg  string
	}{
		{"no nodes", func() *streaming.Builder { return streaming.NewBuilder().Input("x") }, "", "no nodes"},
		{"unknown input", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", newSum, "y")
		}, "s", `unknown input "y"`},
		{"duplicate node", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", newSum, "x").Node("s", newSum, "x")
		}, "s", "already used"},
		{"node shadows input", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("x", newSum, "x")
		}, "x", "already used"},
		{"cycle", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").
				Node("a", newAdd, "x", "c").
				Node("b", newSum, "a").
				Node("c", newSum, "b")
		}, "a", `is part of a cycle: "a" -> "b" -> "c" -> "a"`},
		{"self loop", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("a", newAdd, "x", "a")
		}, "a", `is part of a cycle: "a" -> "a"`},
		// d, declared first, only reads from the cycle: the error names a
		// node on it.
		{"downstream of a cycle", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").
				Node("d", newSum, "b").
				Node("a", newAdd, "x", "c").
				Node("b", newSum, "a").
				Node("c", newSum, "b")
		}, "a", `is part of a cycle: "a" -> "b" -> "c" -> "a"`},
		{"too few inputs", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("a", newAdd, "x")
		}, "a", `operator "add" takes 2 inputs, wired with 1`},
		{"too many inputs", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x", "y").Node("s", newSum, "x", "y")
		}, "s", `operator "sum" takes 1 input, wired with 2`},
		{"no inputs", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", newSum)
		}, "s", "no inputs"},
		{"nil factory", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", nil, "x")
		}, "s", "nil operator factory"},
		{"factory returns nil", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", func() streaming.Operator { return nil }, "x")
		}, "s", "returned nil"},
		{"unknown output", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", newSum, "x").Output("t")
		}, "t", "declared as output"},
		{"repeated output", func() *streaming.Builder {
			return streaming.NewBuilder().Input("x").Node("s", newSum, "x").Output("s", "x", "s")
		}, "s", "declared as output twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.build().Build()
			require.Error(t, err)
			assert.Nil(t, g)
			var ge *streaming.GraphError
			require.True(t, errors.As(err, &ge), "want *GraphError, got %T", err)
			assert.Equal(t, tc.wantNode, ge.Node)
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

func TestEvalTopologicalOrder(t *testing.T) {
	// Nodes declared out of order: "total" reads "both" which is declared
	// after it; evaluation must still run "both" first.
	g, err := streaming.NewBuilder().
		Input("a", "b").
		Node("total", newSum, "both").
		Node("both", newAdd, "a", "b").
		Output("both", "total").
		Build()
	require.NoError(t, err)
	assert.Equal(t, []string{"both", "total"}, g.Outputs())
	ops := g.Operators()
	require.Len(t, ops, 2)
	assert.Equal(t, "both", ops[0].Node)
	assert.Equal(t, "total", ops[1].Node)

	in := g.NewInstance()
	var want float64
	for i := 1; i <= 5; i++ {
		a, b := float64(i), float64(10*i)
		in.Eval(int64(i), streaming.Float(a), streaming.Float(b))
		want += a + b
		assert.Equal(t, a+b, in.Output(0).Float64())
		assert.Equal(t, want, in.Output(1).Float64())
	}
}

func TestDefaultOutputsAreSinks(t *testing.T) {
	g, err := streaming.NewBuilder().Input("x").
		Node("p", newPos, "x").
		Node("s", newSum, "p").
		Node("c", newCounter, "x").
		Build()
	require.NoError(t, err)
	assert.Equal(t, []string{"s", "c"}, g.Outputs())
}

// TestDefaultOutputsInEvaluationOrder: the default outputs come in
// evaluation order, as Builder.Output documents, not in declaration order:
// "late" is declared first but reads "mid", declared last. (The doc said
// declaration order, which Instance.Output indexes would have got wrong.)
func TestDefaultOutputsInEvaluationOrder(t *testing.T) {
	g, err := streaming.NewBuilder().Input("x").
		Node("late", newSum, "mid").
		Node("early", newCounter, "x").
		Node("mid", newPos, "x").
		Build()
	require.NoError(t, err)
	assert.Equal(t, []string{"early", "late"}, g.Outputs())
	var evalOrder []string
	for _, op := range g.Operators() {
		if slices.Contains(g.Outputs(), op.Node) {
			evalOrder = append(evalOrder, op.Node)
		}
	}
	assert.Equal(t, evalOrder, g.Outputs())
}

func TestNoOutputSkipsDownstream(t *testing.T) {
	g, err := streaming.NewBuilder().Input("x").
		Node("p", newPos, "x").
		Node("s", newSum, "p").
		Node("c", newCounter, "p").
		Output("s", "c").
		Build()
	require.NoError(t, err)
	in := g.NewInstance()
	inputs := []float64{1, -1, 2, 0, -5, 3}
	var total float64
	for i, v := range inputs {
		in.Eval(int64(i), streaming.Float(v))
		if v > 0 {
			total += v
			assert.Equal(t, total, in.Output(0).Float64(), "record %d", i)
		} else {
			assert.True(t, in.Output(0).IsNone(), "record %d: sum must be skipped when its input did not emit", i)
		}
		// counter accepts partial inputs: it runs on every record.
		assert.Equal(t, int64(i+1), in.Output(1).Int64())
	}
	v, ok := in.Value("p")
	assert.True(t, ok)
	assert.True(t, v.Float64() == 3)
	_, ok = in.Value("nope")
	assert.False(t, ok)
}

func TestEvalMissingInputsAreNone(t *testing.T) {
	g, err := streaming.NewBuilder().Input("a", "b").
		Node("both", newAdd, "a", "b").Build()
	require.NoError(t, err)
	in := g.NewInstance()
	in.Eval(1, streaming.Float(1), streaming.Float(2))
	assert.Equal(t, 3.0, in.Output(0).Float64())
	in.Eval(2, streaming.Float(1)) // b missing: add is skipped
	assert.True(t, in.Output(0).IsNone())
}

func TestEvalDoesNotAllocate(t *testing.T) {
	g, err := streaming.NewBuilder().Input("a", "b").
		Node("both", newAdd, "a", "b").
		Node("total", newSum, "both").
		Node("c", newCounter, "total").
		Build()
	require.NoError(t, err)
	in := g.NewInstance()
	inputs := []streaming.Computed{streaming.Float(1), streaming.Float(2)}
	allocs := testing.AllocsPerRun(1000, func() { in.Eval(1, inputs...) })
	assert.Zero(t, allocs)
}

func TestKeyedCreatesOnFirstSight(t *testing.T) {
	g, err := streaming.NewBuilder().Input("x").Node("s", newSum, "x").Build()
	require.NoError(t, err)
	k := streaming.NewKeyed[string](g)
	for i := range 10 {
		k.Eval("a", int64(i), streaming.Float(1))
		if i%2 == 0 {
			k.Eval("b", int64(i), streaming.Float(10))
		}
	}
	assert.Equal(t, 2, k.Len())
	a, ok := k.Lookup("a")
	require.True(t, ok)
	assert.Equal(t, 10.0, a.Output(0).Float64())
	b, _ := k.Lookup("b")
	assert.Equal(t, 50.0, b.Output(0).Float64())
	_, ok = k.Lookup("c")
	assert.False(t, ok, "Lookup must not create")
	seen := map[string]float64{}
	for key, in := range k.All() {
		seen[key] = in.Output(0).Float64()
	}
	assert.Equal(t, map[string]float64{"a": 10, "b": 50}, seen)
	k.Delete("a")
	assert.Equal(t, 1, k.Len())
	assert.Equal(t, 1.0, k.Eval("a", 0, streaming.Float(1)).Output(0).Float64(), "a deleted key starts fresh")
}

// A node that returns Rejected is counted for the record, its output is a
// plain None, and downstream nodes are skipped as for NoOutput; the count
// starts over with every record and costs no allocation.
func TestEvalCountsRejectedInputs(t *testing.T) {
	g, err := streaming.NewBuilder().Input("x", "y").
		Node("fx", func() streaming.Operator { return finite{} }, "x").
		Node("fy", func() streaming.Operator { return finite{} }, "y").
		Node("s", newSum, "fx").
		Node("c", newCounter, "fx").
		Output("fx", "s", "c").
		Build()
	require.NoError(t, err)
	in := g.NewInstance()
	nan, inf := streaming.Float(math.NaN()), streaming.Float(math.Inf(1))
	for i, tc := range []struct {
		x, y     streaming.Computed
		rejected int
	}{
		{streaming.Float(1), streaming.Float(2), 0},
		{nan, streaming.Float(2), 1},
		{nan, inf, 2},
		{streaming.Float(3), streaming.Float(2), 0},
	} {
		in.Eval(int64(i), tc.x, tc.y)
		require.Equal(t, tc.rejected, in.Rejected(), "record %d", i)
		if tc.rejected > 0 && tc.x.Float64() != tc.x.Float64() {
			require.Equal(t, streaming.None(), in.Output(0), "record %d: a rejected output is a plain None", i)
			require.False(t, in.Output(0).IsRejected())
			require.True(t, in.Output(1).IsNone(), "record %d: downstream of a rejection is skipped", i)
		}
	}
	require.Equal(t, 4.0, in.Output(1).Float64())
	require.Equal(t, int64(4), in.Output(2).Int64(), "a partial-inputs node still runs on every record")
	require.True(t, streaming.Rejected().IsNone())
	require.True(t, streaming.Rejected().IsRejected())
	require.False(t, streaming.NoOutput().IsRejected())
	allocs := testing.AllocsPerRun(1000, func() { in.Eval(9, nan, inf) })
	require.Zero(t, allocs)
}
