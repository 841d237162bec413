package ops

import (
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

const partial = streaming.WarmupPartial

func TestPartialWarmupHandComputed(t *testing.T) {
	tests := []struct {
		name string
		op   streaming.Operator
		in   []float64
		want []streaming.Computed
	}{
		{"sma/3 partial: mean so far", NewSMA(3).WithWarmup(partial),
			[]float64{3, nan, 6, 9, 12}, []streaming.Computed{f(3), none, f(4.5), f(6), f(9)}},
		// α = 0.5: seed in progress 2, (2+4)/2 = 3, then the seed (2+4+6)/3 = 4, 4+0.5(8−4) = 6
		{"ema/3 partial: seed in progress", NewEMA(3).WithWarmup(partial),
			[]float64{2, 4, 6, 8}, []streaming.Computed{f(2), f(3), f(4), f(6)}},
		{"rolling_min/3 partial", NewRollingMin(3).WithWarmup(partial),
			[]float64{5, 7, 2, 9, 8}, []streaming.Computed{f(5), f(5), f(2), f(2), f(2)}},
		{"rolling_max/3 partial", NewRollingMax(3).WithWarmup(partial),
			[]float64{5, 7, 2, 1, 0}, []streaming.Computed{f(5), f(7), f(7), f(7), f(2)}},
		// [1] → 1; [1 9]: median 5, |9−5| > 3 → 5; [1 9 2]: median 2 → 2;
		// [9 2 3]: median 3 → 3
		{"median_despike/3 partial", NewMedianDespike(3, 3).WithWarmup(partial),
			[]float64{1, 9, 2, 3}, []streaming.Computed{f(1), f(5), f(2), f(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { optest.RequireOutputs(t, tt.want, feed(tt.op, tt.in)) })
	}
}

// The policy is configuration, not state: a blob saved during a partial
// warm-up loads into a full-warm-up node, which stays silent until its
// window is full and then agrees with the partial one.
func TestWarmupPolicyIsNotState(t *testing.T) {
	p := NewSMA(4).WithWarmup(partial)
	feed(p, []float64{1, 2})
	blob, err := p.Save()
	if err != nil {
		t.Fatal(err)
	}
	q := NewSMA(4)
	if err := q.Load(blob); err != nil {
		t.Fatal(err)
	}
	optest.RequireOutputs(t, []streaming.Computed{none, f(2.5), f(3.5)}, feed(q, []float64{3, 4, 5}))
}
