package ops

import (
	"math"
	"slices"
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

// Partial warm-up against from-scratch reference formulas over the valid
// values seen so far: the operator's O(1) updates agree with the textbook
// definition over the partial window at every step, and from the N-th
// value on the outputs equal the full-warm-up operator's.
func TestPartialWarmupAgainstReference(t *testing.T) {
	xs := noisy(3, 2000)
	last := func(h []float64, n int) []float64 { return h[max(0, len(h)-n):] }
	mean := func(w []float64) float64 {
		s := 0.0
		for _, v := range w {
			s += v
		}
		return s / float64(len(w))
	}
	tests := []struct {
		name    string
		op, ful streaming.Operator
		n       int
		ref     func(hist []float64) streaming.Computed
	}{
		{"sma/7", NewSMA(7).WithWarmup(partial), NewSMA(7), 7,
			func(h []float64) streaming.Computed { return f(mean(last(h, 7))) }},
		{"ema/10: mean so far, then α=2/11 recursion", NewEMA(10).WithWarmup(partial), NewEMA(10), 10,
			func(h []float64) streaming.Computed {
				if len(h) < 10 {
					return f(mean(h))
				}
				e := mean(h[:10])
				for _, v := range h[10:] {
					e = (2.0/11)*v + (1-2.0/11)*e
				}
				return f(e)
			}},
		{"rolling_min/16", NewRollingMin(16).WithWarmup(partial), NewRollingMin(16), 16,
			func(h []float64) streaming.Computed { return f(slices.Min(last(h, 16))) }},
		{"rolling_max/16", NewRollingMax(16).WithWarmup(partial), NewRollingMax(16), 16,
			func(h []float64) streaming.Computed { return f(slices.Max(last(h, 16))) }},
		{"median_despike/6", NewMedianDespike(6, 3).WithWarmup(partial), NewMedianDespike(6, 3), 6,
			func(h []float64) streaming.Computed {
				w := slices.Sorted(slices.Values(last(h, 6)))
				med := w[len(w)/2]
				if len(w)%2 == 0 {
					med = (w[len(w)/2-1] + w[len(w)/2]) / 2
				}
				if x := h[len(h)-1]; math.Abs(x-med) <= 3 {
					return f(x)
				}
				return f(med)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hist []float64
			in := make([]streaming.Computed, 1)
			for i, x := range xs {
				in[0] = f(x)
				got, full := tt.op.Eval(in, int64(i)), tt.ful.Eval(in, int64(i))
				want := none
				if valid(x) {
					hist = append(hist, x)
					want = tt.ref(hist)
				}
				if !optest.ApproxEqual(got, want) {
					t.Fatalf("record %d (x=%v): got %v, want %v", i, x, got, want)
				}
				if len(hist) >= tt.n && got != full {
					t.Fatalf("record %d: partial %v differs from full %v after warm-up", i, got, full)
				}
			}
		})
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
