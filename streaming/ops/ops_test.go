package ops

import (
	"math"
	"slices"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

// Hand-computed tables: warm-up, steady state and NaN/±Inf for each
// single-input operator, event times 0, 1, 2, ...
func TestOperatorsHandComputed(t *testing.T) {
	sig := streaming.Sig
	tests := []struct {
		name string
		op   streaming.Operator
		in   []float64
		want []streaming.Computed
	}{
		{"sma/3 warm-up then mean of last 3", NewSMA(3),
			[]float64{1, 2, 3, 4, nan, 5, pinf, 6, ninf},
			[]streaming.Computed{none, none, f(2), f(3), none, f(4), none, f(5), none}},
		{"sma/1 is identity", NewSMA(1), []float64{7, nan, -2}, []streaming.Computed{f(7), none, f(-2)}},
		// α = 2/(3+1) = 0.5; seed = (1+2+3)/3 = 2; then 2+0.5(4−2)=3; 3+0.5(8−3)=5.5
		{"ema/3 seeded by the mean of the first 3", NewEMA(3),
			[]float64{1, nan, 2, 3, 4, pinf, 8},
			[]streaming.Computed{none, none, none, f(2), f(3), none, f(5.5)}},
		{"hysteresis 20/25 no chatter between thresholds", NewHysteresis(20, 25),
			[]float64{19, 24.9, 25, 24, 21, 20.1, 20, 22, 24.9, nan, 26, pinf, 19},
			[]streaming.Computed{sig(Low, 19), sig(Low, 24.9), sig(High, 25), sig(High, 24), sig(High, 21), sig(High, 20.1),
				sig(Low, 20), sig(Low, 22), sig(Low, 24.9), none, sig(High, 26), none, sig(Low, 19)}},
		{"threshold cross at 10, no dwell; at the threshold is below", NewThresholdCross(10),
			[]float64{5, 11, 12, 9, 10, 10, 11, nan, 10.5, ninf, 3},
			[]streaming.Computed{none, sig(Up, 11), none, sig(Down, 9), none, none, sig(Up, 11), none, none, none, sig(Down, 3)}},
		{"threshold cross: first value above sets the side silently", NewThresholdCross(10),
			[]float64{nan, 15, 16, 4}, []streaming.Computed{none, none, none, sig(Down, 4)}},
		{"deadband 1: strictly more than the band", NewDeadband(1),
			[]float64{10, 10.5, 11, 11.25, 9.75, nan, 10, pinf, 8.5},
			[]streaming.Computed{f(10), none, none, f(11.25), f(9.75), none, none, none, f(8.5)}},
		{"rate of change per ts unit", NewRateOfChange(),
			[]float64{1, 3, nan, 9, 9, pinf, 1},
			// ts 0..6; NaN at ts 2 and Inf at ts 5 are skipped: (9−3)/(3−1)=3, 0, (1−9)/(6−4)=−4
			[]streaming.Computed{none, f(2), none, f(3), f(0), none, f(-4)}},
		{"rolling min/3", NewRollingMin(3),
			[]float64{5, 3, 4, 6, 7, nan, 2, 2, 9, 9, 9},
			[]streaming.Computed{none, none, f(3), f(3), f(4), none, f(2), f(2), f(2), f(2), f(9)}},
		{"rolling max/3", NewRollingMax(3),
			[]float64{5, 3, 4, 6, 1, ninf, 0, 0, -1, -2, 8},
			[]streaming.Computed{none, none, f(5), f(6), f(6), none, f(6), f(1), f(0), f(0), f(8)}},
		// windows (sorted): [1 1 1 1 10]→median 1, |10−1|>2 → 1;
		// [1 1 1 2 10]→1, |2−1|≤2 → 2; [1 1 2 3 10]→2, |3−2|≤2 → 3;
		// [1 2 3 10 30]→3, 30 → 3; [2 3 3 10 30]→3, 3 → 3 (oldest 1 left first)
		{"median despike 5, maxDev 2", NewMedianDespike(5, 2),
			[]float64{1, 1, 1, 1, 10, nan, 2, 3, 30, 3},
			[]streaming.Computed{none, none, none, none, f(1), none, f(2), f(3), f(3), f(3)}},
		// even window: median of [1 2 4 8] is 3; 8 is 5 away > 4 → 3
		{"median despike 4 even window", NewMedianDespike(4, 4),
			[]float64{1, 2, 4, 8, 5},
			[]streaming.Computed{none, none, none, f(3), f(5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			optest.RequireOutputs(t, tt.want, feed(tt.op, tt.in))
		})
	}
}

func TestRateOfChangeTime(t *testing.T) {
	tests := []struct {
		name string
		op   *RateOfChange
		ts   []int64
		xs   []float64
		want []streaming.Computed
	}{
		{"duplicate and out-of-order timestamps are ignored", NewRateOfChange(),
			[]int64{0, 2, 2, 1, 4}, []float64{1, 5, 7, 0, 1},
			[]streaming.Computed{none, f(2), none, none, f(-2)}},
		{"per second with nanosecond event time", NewRateOfChange(Per(1e9)),
			[]int64{0, 500_000_000, 2_500_000_000}, []float64{10, 11, 7},
			[]streaming.Computed{none, f(2), f(-2)}},
		// Bug: ts-prevTS overflowed int64 and the rate came out negative.
		{"event times more than 2^63 apart", NewRateOfChange(Per(1e19)),
			[]int64{math.MinInt64 / 2, math.MaxInt64/2 + 2}, []float64{0, 1},
			[]streaming.Computed{none, f(1e19 / (float64(math.MaxInt64) + 2))}},
		// Bug: x − prev overflowed to ±Inf for a change beyond MaxFloat64,
		// and a finite rate (2e308 over 10 units, or per 0.5) was dropped
		// as an overflow.
		{"change beyond MaxFloat64 over several units", NewRateOfChange(),
			[]int64{0, 10, 20}, []float64{-1e308, 1e308, -1e308},
			[]streaming.Computed{none, f(2e307), f(-2e307)}},
		{"change beyond MaxFloat64 per half a unit", NewRateOfChange(Per(0.5)),
			[]int64{0, 1, 2}, []float64{1e308, -1e308, 1e308},
			[]streaming.Computed{none, f(-1e308), f(1e308)}},
		{"rate beyond MaxFloat64 is still not emitted", NewRateOfChange(),
			[]int64{0, 1, 3}, []float64{-1e308, 1e308, -1e308},
			[]streaming.Computed{none, none, f(-1e308)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]streaming.Computed, len(tt.xs))
			for i := range tt.xs {
				got[i] = tt.op.Eval([]streaming.Computed{f(tt.xs[i])}, tt.ts[i])
			}
			optest.RequireOutputs(t, tt.want, got)
		})
	}
}

func TestThresholdCrossDwell(t *testing.T) {
	sig := streaming.Sig
	type rec struct {
		ts int64
		x  float64
	}
	tests := []struct {
		name string
		op   *ThresholdCross
		recs []rec
		want []streaming.Computed
	}{
		{"an excursion shorter than the dwell is no crossing; a held one is confirmed once",
			NewThresholdCross(10, WithDwell(3)),
			[]rec{{0, 5}, {1, 11}, {2, 12}, {3, 4}, {4, 11}, {6, 12}, {7, 13}, {8, 14}, {9, 5}, {10, nan}, {11, 6}, {12, 6}},
			// up pending at 1, cancelled at 3; pending again at 4, confirmed at 7 (7−4 ≥ 3);
			// down pending at 9, NaN at 10 keeps it pending, confirmed at 12.
			[]streaming.Computed{none, none, none, none, none, none, sig(Up, 13), none, none, none, none, sig(Down, 6)}},
		{"exactly the dwell confirms", NewThresholdCross(0, WithDwell(5)),
			[]rec{{0, -1}, {10, 1}, {14, 1}, {15, 2}},
			[]streaming.Computed{none, none, none, sig(Up, 2)}},
		// Bug: ts − since overflowed int64 and a side held for more than
		// 2^63 units never confirmed.
		{"a side held for more than 2^63 event-time units", NewThresholdCross(0, WithDwell(5)),
			[]rec{{math.MinInt64 / 2, -1}, {math.MinInt64/2 + 1, 1}, {math.MaxInt64/2 + 2, 1}},
			[]streaming.Computed{none, none, sig(Up, 1)}},
		{"a record earlier than the first on the new side does not confirm", NewThresholdCross(0, WithDwell(5)),
			[]rec{{100, -1}, {110, 1}, {0, 1}, {115, 1}},
			[]streaming.Computed{none, none, none, sig(Up, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]streaming.Computed, len(tt.recs))
			for i, r := range tt.recs {
				got[i] = tt.op.Eval([]streaming.Computed{f(r.x)}, r.ts)
			}
			optest.RequireOutputs(t, tt.want, got)
		})
	}
}

// OnMode: a ThresholdCross at 0.5 behind a Hysteresis confirms the
// hysteresis' mode changes, reporting the value that confirmed them.
func TestThresholdCrossOnMode(t *testing.T) {
	h, c := NewHysteresis(20, 25), NewThresholdCross(0.5, OnMode(), WithDwell(2))
	xs := []float64{18, 26, 22, 19, 26, 24, 23, 21, 19, 18}
	// modes:       L   H   H   L   H   H   H   H   L   L
	// High at ts 1 falls back at ts 3 (held < 2): no crossing. High from
	// ts 4 is confirmed at ts 6 with value 23. Low from ts 8 is not yet
	// confirmed at ts 9.
	want := []streaming.Computed{none, none, none, none, none, none, streaming.Sig(Up, 23), none, none, none}
	got := make([]streaming.Computed, len(xs))
	for i, x := range xs {
		got[i] = c.Eval([]streaming.Computed{h.Eval([]streaming.Computed{f(x)}, int64(i))}, int64(i))
	}
	optest.RequireOutputs(t, want, got)
}

// Reference formulas recomputed from scratch over the valid values seen so
// far, on a long noisy stream: the operators' O(1) updates must agree with
// the textbook definitions at every step.
func TestOperatorsAgainstReference(t *testing.T) {
	xs := noisy(1, 3000)
	last := func(h []float64, n int) []float64 { return h[max(0, len(h)-n):] }
	mean := func(w []float64) float64 {
		s := 0.0
		for _, v := range w {
			s += v
		}
		return s / float64(len(w))
	}
	tests := []struct {
		name string
		op   streaming.Operator
		ref  func(hist []float64) streaming.Computed // hist: valid values so far, newest last
	}{
		{"sma/7 = arithmetic mean of the last 7", NewSMA(7), func(h []float64) streaming.Computed {
			if len(h) < 7 {
				return none
			}
			s := 0.0
			for _, v := range h[len(h)-7:] {
				s += v
			}
			return f(s / 7)
		}},
		{"ema/10 = SMA seed then recursive α=2/11", NewEMA(10), func(h []float64) streaming.Computed {
			if len(h) < 10 {
				return none
			}
			e := 0.0
			for _, v := range h[:10] {
				e += v
			}
			e /= 10
			for _, v := range h[10:] {
				e = (2.0/11)*v + (1-2.0/11)*e
			}
			return f(e)
		}},
		{"rolling_min/16 = min of the last 16", NewRollingMin(16), func(h []float64) streaming.Computed {
			if len(h) < 16 {
				return none
			}
			return f(slices.Min(h[len(h)-16:]))
		}},
		{"rolling_max/16 = max of the last 16", NewRollingMax(16), func(h []float64) streaming.Computed {
			if len(h) < 16 {
				return none
			}
			return f(slices.Max(h[len(h)-16:]))
		}},
		{"median_despike/7 = median of a sorted copy", NewMedianDespike(7, 3), func(h []float64) streaming.Computed {
			if len(h) < 7 {
				return none
			}
			w := slices.Sorted(slices.Values(h[len(h)-7:]))
			x := h[len(h)-1]
			if math.Abs(x-w[3]) > 3 {
				return f(w[3])
			}
			return f(x)
		}},
		{"deadband/0.5 against the last reported value", NewDeadband(0.5), func(h []float64) streaming.Computed {
			last := h[0]
			for i, v := range h {
				if i > 0 && math.Abs(v-last) > 0.5 {
					last = v
					if i == len(h)-1 {
						return f(v)
					}
				}
			}
			if len(h) == 1 {
				return f(h[0])
			}
			return none
		}},
		// Partial warm-up.
		{"sma/7 partial: over the values so far", NewSMA(7).WithWarmup(partial),
			func(h []float64) streaming.Computed { return f(mean(last(h, 7))) }},
		{"ema/10 partial: mean so far, then α=2/11 recursion", NewEMA(10).WithWarmup(partial),
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
		{"rolling_min/16 partial: over the values so far", NewRollingMin(16).WithWarmup(partial),
			func(h []float64) streaming.Computed { return f(slices.Min(last(h, 16))) }},
		{"rolling_max/16 partial: over the values so far", NewRollingMax(16).WithWarmup(partial),
			func(h []float64) streaming.Computed { return f(slices.Max(last(h, 16))) }},
		{"median_despike/6 partial: over the values so far", NewMedianDespike(6, 3).WithWarmup(partial),
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
				got := tt.op.Eval(in, int64(i))
				want := none
				if valid(x) {
					hist = append(hist, x)
					want = tt.ref(hist)
				}
				if !optest.ApproxEqual(got, want) {
					t.Fatalf("record %d (x=%v): got %v, want %v", i, x, got, want)
				}
			}
		})
	}
}

// The compensated running sum keeps a long-running SMA exact where a
// naive running sum drifts: values far apart in magnitude enter and leave
// the window for a million events.
func TestSMADoesNotDrift(t *testing.T) {
	s := NewSMA(4)
	in := make([]streaming.Computed, 1)
	var got streaming.Computed
	for i := range 1_000_000 {
		v := 0.1
		if i%2 == 0 {
			v = 1e8 + 0.3
		}
		in[0] = f(v)
		got = s.Eval(in, int64(i))
	}
	want := (2*(1e8+0.3) + 2*0.1) / 4
	if math.Abs(got.Float64()-want) > 1e-8 {
		t.Fatalf("after 1e6 events: %v, want %v (drift %g)", got.Float64(), want, got.Float64()-want)
	}
}

// TestSMAAfterAHugeValueLeaves: once a value that outweighed the rest of
// the window by many orders of magnitude has left it, the mean is that of
// the values that stay, exactly 0 for a window of zeros, for as long as
// they stay. Bug: the compensated sum kept a rounding residue of the large
// value, and a window of zeros after 1, 0.1, 8e20 averaged 2.8e-17 for
// ever (a threshold_cross at 0 behind it saw the zeros above 0).
func TestSMAAfterAHugeValueLeaves(t *testing.T) {
	for _, lead := range [][]float64{{1, 0.1, 8e20}, {8e20, 1, 0.1}, {1, 8e20, 0.1}, {0.1, 0.2, 1e17}} {
		for _, w := range []streaming.Warmup{streaming.WarmupFull, streaming.WarmupPartial} {
			xs := append(slices.Clone(lead), 0, 0, 0, 0, 0, 0, 0, 0)
			out := feed(NewSMA(3).WithWarmup(w), xs)
			for i := len(lead) + 2; i < len(xs); i++ {
				if out[i] != f(0) {
					t.Fatalf("%v then zeros, warm-up %v: record %d gave %v, want 0", lead, w, i, out[i])
				}
			}
			xs = append(slices.Clone(lead), 0.3, 0.1, 0.7)
			out = feed(NewSMA(3).WithWarmup(w), xs)
			if got, want := out[len(xs)-1].Float64(), (0.3+0.1+0.7)/3; math.Abs(got-want) > 1e-15 {
				t.Fatalf("%v then 0.3 0.1 0.7, warm-up %v: mean %v, want %v", lead, w, got, want)
			}
		}
	}
}

// A restored SMA sums its window afresh, when a huge value leaves, in the
// same order as the one that never stopped (Load rotates the ring), so it
// continues bit for bit. Before, it added the ring in slot order and the
// mean came out -2.2451467419173367e+28, not ...62e+28.
func TestSMARestoredSumsAfreshInTheSameOrder(t *testing.T) {
	xs := []float64{-5.8350495128580996e+29, 6.473395469863862e+39, 5.736448846615616e-06, 0.0006795292575482908,
		7.372473809351193e+39, 9.205154787486903e+39, -0.7787851870474343, -0.0007166043380360809, 4.535655362273117e+28,
		-3.290225299565517e+29, 1.040542369804336e+29, -0.0007032255332891502, 0.0006130442830844065,
		0.0005689128288149463, 0.00014435120212785547, 3.572937414811097e+13, 5.0740639009241995e+39,
		-2.5006895179678777e+13, 4.558211129973433e+12, 5.616267853016265e+07, 1.4834745230838565e+40}
	want := feed(NewSMA(8), xs)
	for cut := 8; cut < len(xs); cut++ {
		a := NewSMA(8)
		feed(a, xs[:cut])
		blob, err := a.Save()
		if err != nil {
			t.Fatal(err)
		}
		b := NewSMA(8)
		if err := b.Load(blob); err != nil {
			t.Fatal(err)
		}
		for i := cut; i < len(xs); i++ {
			if got := b.Eval([]streaming.Computed{f(xs[i])}, int64(i)); got != want[i] {
				t.Fatalf("restored at %d: record %d gave %v, uninterrupted run %v", cut, i, got, want[i])
			}
		}
	}
}

func TestConstructorsPanicOnImpossibleParameters(t *testing.T) {
	tests := []struct {
		name string
		make func()
	}{
		{"sma window 0", func() { NewSMA(0) }},
		{"ema period 0", func() { NewEMA(0) }},
		{"hysteresis low == high", func() { NewHysteresis(5, 5) }},
		{"hysteresis NaN", func() { NewHysteresis(nan, 5) }},
		{"cross NaN threshold", func() { NewThresholdCross(nan) }},
		{"cross negative dwell", func() { NewThresholdCross(1, WithDwell(-1)) }},
		{"deadband negative", func() { NewDeadband(-1) }},
		{"rate per 0", func() { NewRateOfChange(Per(0)) }},
		{"rolling min window 0", func() { NewRollingMin(0) }},
		{"rolling max window 0", func() { NewRollingMax(0) }},
		{"despike window 0", func() { NewMedianDespike(0, 1) }},
		{"despike negative maxDev", func() { NewMedianDespike(3, -1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("constructor did not panic")
				}
			}()
			tt.make()
		})
	}
}

// Graph.Build refuses a node wired with the wrong number of inputs,
// naming the node.
func TestArityCheckedAtBuild(t *testing.T) {
	_, err := streaming.NewBuilder().Input("a", "b").
		Node("smooth", func() streaming.Operator { return NewSMA(3) }, "a", "b").
		Build()
	var ge *streaming.GraphError
	if !errorsAs(err, &ge) || ge.Node != "smooth" {
		t.Fatalf("Build: got %v, want a GraphError naming node smooth", err)
	}
}

// TestConstantInputAveragesToItself: SMA and EMA over one repeated value
// emit exactly that value, in either warm-up policy, for windows whose
// sums round. Bug: the mean was the (compensated) sum divided by N, and
// 0.1 three times sums to 0.30000000000000004, so SMA(3) and EMA(3) over
// a constant 0.1 emitted 0.10000000000000002.
func TestConstantInputAveragesToItself(t *testing.T) {
	for _, c := range []float64{0.1, 0.3, 7.77, 1e-3, 123.45, -0.7} {
		for _, n := range []int{3, 5, 7, 20, 100} {
			for _, w := range []streaming.Warmup{streaming.WarmupFull, streaming.WarmupPartial} {
				xs := make([]float64, 3*n)
				for i := range xs {
					xs[i] = c
				}
				for _, op := range []streaming.Operator{NewSMA(n).WithWarmup(w), NewEMA(n).WithWarmup(w)} {
					for i, got := range feed(op, xs) {
						if got.IsNone() {
							continue
						}
						if got.Float64() != c {
							t.Fatalf("%s(%d) %v over constant %v: record %d emitted %v", op.Name(), n, w, c, i, got.Float64())
						}
					}
				}
			}
		}
	}
}

// TestMedianDespikeOfSubnormalsIsNotZero: the even-window median of
// equal subnormal values is that value, so none of them is a spike. Bug:
// the median halved each middle value before adding, and half of 5e-324
// rounds to 0, so a window of 5e-324 had median 0 and every value, 0 away
// from it by more than maxDev 0, was replaced by 0.
func TestMedianDespikeOfSubnormalsIsNotZero(t *testing.T) {
	tiny := math.SmallestNonzeroFloat64
	for _, xs := range [][]float64{{tiny, tiny, tiny}, {-tiny, -tiny, -tiny}, {3 * tiny, 3 * tiny, 3 * tiny, 3 * tiny}} {
		for i, got := range feed(NewMedianDespike(2, 0), xs) {
			if i > 0 && got != f(xs[i]) {
				t.Fatalf("window 2 over %v: record %d emitted %v", xs, i, got)
			}
		}
	}
	// Far from 0 it is still the halved sum: no overflow near MaxFloat64.
	if got := feed(NewMedianDespike(2, 1e308), []float64{math.MaxFloat64, math.MaxFloat64}); got[1] != f(math.MaxFloat64) {
		t.Fatalf("median of two MaxFloat64: %v", got[1])
	}
}
