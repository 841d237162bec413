package ops

import (
	"math"
	"math/rand/v2"

	"github.com/tflo-io/tflo/streaming"
)

var (
	nan  = math.NaN()
	pinf = math.Inf(1)
	ninf = math.Inf(-1)
	none = streaming.None()
)

func f(v float64) streaming.Computed { return streaming.Float(v) }

// feed runs xs through op with event times 0, 1, 2, ... and returns the
// outputs.
func feed(op streaming.Operator, xs []float64) []streaming.Computed {
	out := make([]streaming.Computed, len(xs))
	in := make([]streaming.Computed, 1)
	for i, x := range xs {
		in[0] = streaming.Float(x)
		out[i] = op.Eval(in, int64(i))
	}
	return out
}

// noisy returns n values of a random walk with occasional NaN, ±Inf and
// spikes, so warm-up, invalid input and ties are all exercised.
func noisy(seed uint64, n int) []float64 {
	r := rand.New(rand.NewPCG(seed, 42))
	xs := make([]float64, n)
	v := 20.0
	for i := range xs {
		switch p := r.Float64(); {
		case p < 0.03:
			xs[i] = nan
			continue
		case p < 0.04:
			xs[i] = pinf
			continue
		case p < 0.05:
			xs[i] = ninf
			continue
		case p < 0.08:
			xs[i] = v + 30*(r.Float64()-0.5) // spike, the walk continues
			continue
		case p < 0.12:
			// repeat v exactly: ties in min/max/median
		default:
			v += r.NormFloat64()
			v = math.Round(v*100) / 100
		}
		xs[i] = v
	}
	return xs
}

func valid(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
