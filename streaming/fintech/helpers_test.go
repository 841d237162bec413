package fintech

import (
	"math"
	"math/rand/v2"

	"github.com/tflo-io/tflo/streaming"
)

var (
	nan  = math.NaN()
	pinf = math.Inf(1)
	none = streaming.None()
)

func f(v float64) streaming.Computed { return streaming.Float(v) }

// tick is one market record: a price and a volume (ignored by single-input
// operators).
type tick struct{ p, v float64 }

// feed runs ticks through op (with event times 0, 1, 2, ...) and returns
// its outputs.
func feed(op streaming.Operator, ticks []tick) []streaming.Computed {
	lo, _ := op.(streaming.Arity).Arity()
	in := make([]streaming.Computed, lo)
	out := make([]streaming.Computed, len(ticks))
	for i, t := range ticks {
		in[0] = streaming.Float(t.p)
		if lo > 1 {
			in[1] = streaming.Float(t.v)
		}
		out[i] = op.Eval(in, int64(i))
	}
	return out
}

func prices(ps ...float64) []tick {
	ts := make([]tick, len(ps))
	for i, p := range ps {
		ts[i] = tick{p: p, v: 1}
	}
	return ts
}

// market returns n ticks of a positive random-walk price with random
// volumes, occasional zero volume, and occasional NaN, ±Inf and negative
// volume.
func market(seed uint64, n int) []tick {
	r := rand.New(rand.NewPCG(seed, 7))
	ts := make([]tick, n)
	p := 100.0
	for i := range ts {
		p = math.Max(1, p+r.NormFloat64())
		t := tick{p: math.Round(p*100) / 100, v: float64(r.IntN(500))}
		switch q := r.Float64(); {
		case q < 0.02:
			t.p = nan
		case q < 0.03:
			t.p = math.Inf(-1)
		case q < 0.04:
			t.v = pinf
		case q < 0.05:
			t.v = -3
		case q < 0.08:
			t.v = 0
		case q < 0.10:
			t.p = ts[max(i-1, 0)].p // repeat: flat moves
		}
		ts[i] = t
	}
	return ts
}

func valid(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
