package streaming_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

type scale struct {
	streaming.StatelessBase
	k float64
}

func (s *scale) Name() string { return "scale" }
func (s *scale) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	return streaming.Float(s.k * in[0].Float64())
}

func scaleType() streaming.OperatorType {
	return streaming.OperatorType{
		Name: "scale", Doc: "multiplies its input by k", MinInputs: 1, MaxInputs: 1, Output: "float",
		Params: []streaming.Param{
			{Name: "k", Kind: streaming.ParamFloat, Default: 1.0, Doc: "the factor", Min: streaming.Bound(-10), Max: streaming.Bound(10)},
			{Name: "every", Kind: streaming.ParamDuration, Default: time.Second, Doc: "unused"},
			{Name: "mode", Kind: streaming.ParamString, Default: "a", Enum: []string{"a", "b"}, Doc: "unused"},
			{Name: "n", Kind: streaming.ParamInt, Doc: "required count"},
		},
		New: func(p streaming.Params) (func() streaming.Operator, error) {
			k := p.Float("k")
			return func() streaming.Operator { return &scale{k: k} }, nil
		},
	}
}

func TestRegistryResolve(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, r.Register(scaleType()))
	require.Error(t, r.Register(scaleType()), "a second registration of one name is refused")

	_, p, err := r.Resolve("scale", map[string]any{"k": 3, "every": "2s", "n": 4.0})
	require.NoError(t, err)
	require.Equal(t, 3.0, p.Float("k"), "an int from YAML is accepted for a float")
	require.Equal(t, 2*time.Second, p.Duration("every"))
	require.Equal(t, "a", p.String("mode"), "default applied")
	require.Equal(t, 4, p.Int("n"), "a whole float is accepted for an int")

	f, err := r.Factory("scale", map[string]any{"k": 2, "n": 1})
	require.NoError(t, err)
	out := f().Eval([]streaming.Computed{streaming.Float(21)}, 0)
	require.Equal(t, 42.0, out.Float64())

	for _, tc := range []struct {
		name  string
		op    string
		raw   map[string]any
		param string
		want  string
	}{
		{"unknown operator", "scal", nil, "", "unknown operator type \"scal\""},
		{"unknown parameter", "scale", map[string]any{"n": 1, "kk": 1}, "kk", "unknown parameter (accepted: k, every, mode, n)"},
		{"missing required", "scale", map[string]any{}, "n", "required"},
		{"mistyped", "scale", map[string]any{"n": "three"}, "n", "want an int"},
		{"not integer", "scale", map[string]any{"n": 1.5}, "n", "not an integer"},
		{"above max", "scale", map[string]any{"n": 1, "k": 11}, "k", "above the maximum 10"},
		{"enum", "scale", map[string]any{"n": 1, "mode": "c"}, "mode", `"c" is not one of a, b`},
		{"bad duration", "scale", map[string]any{"n": 1, "every": "soon"}, "every", "not a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Factory(tc.op, tc.raw)
			require.ErrorContains(t, err, tc.want)
			var pe *streaming.ParamError
			if tc.param != "" {
				require.True(t, errors.As(err, &pe))
				require.Equal(t, tc.param, pe.Param)
				require.True(t, strings.Contains(err.Error(), `operator "scale"`), err.Error())
			} else {
				require.ErrorIs(t, err, streaming.ErrUnknownOperator)
			}
		})
	}
}

// A parameter given to an operator that declares none says so. Bug: it
// read "unknown parameter (accepted: )", an empty list.
func TestRegistryResolveOfAnOperatorWithoutParameters(t *testing.T) {
	r := streaming.NewRegistry()
	bare := scaleType()
	bare.Name, bare.Params = "bare", nil
	require.NoError(t, r.Register(bare))
	_, _, err := r.Resolve("bare", map[string]any{"window": 3})
	require.EqualError(t, err, `operator "bare": parameter "window": unknown parameter (the operator takes none)`)
}

// An operator type looked up in an empty registry (streaming.NewRegistry,
// not pipeline.NewRegistry, which holds tflo's catalogs) says the registry
// is empty. Bug: it read 'unknown operator type "sma" (known: )'.
func TestRegistryResolveInAnEmptyRegistry(t *testing.T) {
	_, _, err := streaming.NewRegistry().Resolve("sma", nil)
	require.ErrorIs(t, err, streaming.ErrUnknownOperator)
	require.EqualError(t, err, `unknown operator type "sma" (the registry is empty: none is registered)`)
}

// A whole number the YAML decoder read as a float (written with an
// exponent or a point) is an int parameter when it fits an int64, as a
// config key's is; out of range it says so. Bug: past 2^53 it was "not an
// integer", so a dwell of 1e16 ns (116 days) was refused and a window of
// 1e17 reported as no integer rather than above its maximum.
func TestRegistryResolveTakesWholeFloatsForInts(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, r.Register(scaleType()))
	_, p, err := r.Resolve("scale", map[string]any{"n": 1e16})
	require.NoError(t, err)
	require.Equal(t, 10_000_000_000_000_000, p.Int("n"))
	_, p, err = r.Resolve("scale", map[string]any{"n": -9.2e18})
	require.NoError(t, err)
	require.Equal(t, -9_200_000_000_000_000_000, p.Int("n"))

	bounded := scaleType()
	bounded.Name = "bounded"
	bounded.Params[3].Max = streaming.Bound(1 << 24)
	require.NoError(t, r.Register(bounded))
	_, _, err = r.Resolve("bounded", map[string]any{"n": 1e17})
	require.EqualError(t, err, `operator "bounded": parameter "n": 1e+17 is above the maximum 1.6777216e+07`)
	_, _, err = r.Resolve("scale", map[string]any{"n": 1e19})
	require.EqualError(t, err, `operator "scale": parameter "n": 1e+19 does not fit an int`)
	_, _, err = r.Resolve("scale", map[string]any{"n": 0x1p63})
	require.EqualError(t, err, `operator "scale": parameter "n": 9.223372036854776e+18 does not fit an int`)
}

// TestRegistryResolveReportsEveryProblem: Resolve names every parameter
// problem at once, each a *ParamError.
func TestRegistryResolveReportsEveryProblem(t *testing.T) {
	r := streaming.NewRegistry()
	require.NoError(t, r.Register(scaleType()))
	_, _, err := r.Resolve("scale", map[string]any{"kk": 1, "k": 11, "mode": "c"})
	require.Error(t, err)
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "several problems are joined: %v", err)
	var params []string
	for _, e := range j.Unwrap() {
		var pe *streaming.ParamError
		require.True(t, errors.As(e, &pe), "%T: %v", e, e)
		params = append(params, pe.Param)
	}
	require.Equal(t, []string{"kk", "k", "mode", "n"}, params, "unknown first, then in declaration order")
	require.ErrorContains(t, err, "above the maximum 10")
	require.ErrorContains(t, err, `"c" is not one of a, b`)
	require.ErrorContains(t, err, `parameter "n": required`)
}

func TestRegistryRefusesBadDeclarations(t *testing.T) {
	r := streaming.NewRegistry()
	bad := scaleType()
	bad.Params[0].Default = 20.0 // above its own maximum
	require.ErrorContains(t, r.Register(bad), "above the maximum")
	bad = scaleType()
	bad.New = nil
	require.ErrorContains(t, r.Register(bad), "nil New")
	// An enum or bounds the parameter's kind does not check, and bounds
	// no value fits, are refused rather than ignored. Bug: all were
	// registered, and an int parameter with an enum took any int.
	bad = scaleType()
	bad.Params[3].Enum = []string{"1", "2"}
	require.EqualError(t, r.Register(bad), `operator "scale": parameter "n": kind int takes no enum (only strings do)`)
	bad = scaleType()
	bad.Params[2].Max = streaming.Bound(3)
	require.EqualError(t, r.Register(bad), `operator "scale": parameter "mode": kind string takes no bounds (only numbers and durations do)`)
	bad = scaleType()
	bad.Params[3].Min, bad.Params[3].Max = streaming.Bound(5), streaming.Bound(1)
	require.EqualError(t, r.Register(bad), `operator "scale": parameter "n": bounds [5, 1] admit no value`)
	require.Empty(t, r.Types())
}

// A New that refuses a parameter without naming the operator gets the
// operator's name from the registry.
func TestRegistryNamesTheOperatorOfNewsRefusal(t *testing.T) {
	r := streaming.NewRegistry()
	typ := scaleType()
	typ.New = func(p streaming.Params) (func() streaming.Operator, error) {
		return nil, &streaming.ParamError{Param: "k", Reason: "must not be 0"}
	}
	require.NoError(t, r.Register(typ))
	_, err := r.Factory("scale", map[string]any{"n": 1, "k": 0})
	require.EqualError(t, err, `operator "scale": parameter "k": must not be 0`)
}

// TestRegistryReportsEveryRefusalOfNew: a New refusing several
// parameters at once (errors.Join, as Resolve reports them) has each
// refusal reported, each naming the operator. Bug: Factory kept the
// first *ParamError it found and dropped the others.
func TestRegistryReportsEveryRefusalOfNew(t *testing.T) {
	r := streaming.NewRegistry()
	typ := scaleType()
	typ.New = func(p streaming.Params) (func() streaming.Operator, error) {
		return nil, errors.Join(
			&streaming.ParamError{Param: "k", Reason: "must not be 0"},
			&streaming.ParamError{Param: "n", Reason: "must be even"},
			errors.New("k and n disagree"))
	}
	require.NoError(t, r.Register(typ))
	_, err := r.Factory("scale", map[string]any{"n": 1, "k": 0})
	require.EqualError(t, err, `operator "scale": parameter "k": must not be 0`+"\n"+
		`operator "scale": parameter "n": must be even`+"\n"+
		`operator "scale": k and n disagree`)
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "still joined, one error a refusal: %v", err)
	for _, e := range j.Unwrap() {
		var pe *streaming.ParamError
		require.True(t, errors.As(e, &pe), "%T: %v", e, e)
		require.Equal(t, "scale", pe.Operator)
	}
}

func TestWarmupParam(t *testing.T) {
	r := streaming.NewRegistry()
	typ := scaleType()
	typ.Params = append(typ.Params, streaming.WarmupParam(streaming.WarmupFull))
	var got streaming.Warmup
	typ.New = func(p streaming.Params) (func() streaming.Operator, error) {
		got = p.Warmup()
		return func() streaming.Operator { return &scale{} }, nil
	}
	require.NoError(t, r.Register(typ))
	_, err := r.Factory("scale", map[string]any{"n": 1})
	require.NoError(t, err)
	require.Equal(t, streaming.WarmupFull, got, "default")
	_, err = r.Factory("scale", map[string]any{"n": 1, "warmup": "partial"})
	require.NoError(t, err)
	require.Equal(t, streaming.WarmupPartial, got)
	_, err = r.Factory("scale", map[string]any{"n": 1, "warmup": "half"})
	require.ErrorContains(t, err, `parameter "warmup": "half" is not one of full, partial`)
	w, err := streaming.ParseWarmup("partial")
	require.NoError(t, err)
	require.Equal(t, "partial", w.String())
}

// TestRegistryRefusesATypeVersionItsOperatorDoesNotHave: a type declaring
// a TypeVersion its operators do not have is refused when built, naming
// the type and both versions; one that agrees builds a fresh operator per
// call. Bug: nothing compared them, and the registry (starter operators)
// listed the declared version, not the one the operators save.
func TestRegistryRefusesATypeVersionItsOperatorDoesNotHave(t *testing.T) {
	r := streaming.NewRegistry()
	typ := scaleType()
	typ.TypeVersion = 3 // scale, stateless, has TypeVersion 0
	require.NoError(t, r.Register(typ))
	_, err := r.Factory("scale", map[string]any{"n": 1})
	var pe *streaming.ParamError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "scale", pe.Operator)
	require.ErrorContains(t, err, "declared TypeVersion 3")
	require.ErrorContains(t, err, "has TypeVersion 0")

	r = streaming.NewRegistry()
	require.NoError(t, r.Register(scaleType()))
	f, err := r.Factory("scale", map[string]any{"n": 1, "k": 2})
	require.NoError(t, err)
	a, b := f(), f()
	require.NotSame(t, a, b, "each call builds its own operator")
	require.Equal(t, 4.0, a.Eval([]streaming.Computed{streaming.Float(2)}, 0).Float64())
	require.Equal(t, 4.0, b.Eval([]streaming.Computed{streaming.Float(2)}, 0).Float64())
}
