package fintech

import (
	"math/big"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

// exactCrossoverRef is crossoverRef in exact rational arithmetic (each
// price's float value, averaged without rounding), so that equal averages
// are equal: the textbook definition, independent of floating point.
func exactCrossoverRef(fastN, slowN int, ps []float64) []streaming.Computed {
	sma := func(end, n int) *big.Rat {
		s := new(big.Rat)
		for _, p := range ps[end-n : end] {
			s.Add(s, new(big.Rat).SetFloat64(p))
		}
		return s.Quo(s, big.NewRat(int64(n), 1))
	}
	out := make([]streaming.Computed, len(ps))
	side := 0
	for end := 1; end <= len(ps); end++ {
		out[end-1] = none
		if end < slowN {
			continue
		}
		fast := sma(end, fastN)
		d := fast.Cmp(sma(end, slowN))
		if d != 0 && side != 0 && d != side {
			v, _ := fast.Float64()
			out[end-1] = streaming.Sig(streaming.Mode(d), v)
		}
		if d != 0 {
			side = d
		}
	}
	return out
}

// TestMACrossoverFlatPricesDoNotCross: over a flat stretch the fast and
// slow averages are equal, which is no side and no crossing. Bug: they
// were compared as computed, and 0.1 three times averaged to
// 0.10000000000000002 where four times gave 0.1, so a flat market set a
// side ("above") and the next drop was reported as a death cross, or a
// return to a flat price after a golden cross as a death cross.
func TestMACrossoverFlatPricesDoNotCross(t *testing.T) {
	crossings := 0
	for _, c := range []float64{0.1, 0.3, 0.7, 1.1, 2.675, 7.77, 100.01, 0.07} {
		for _, w := range [][2]int{{2, 3}, {3, 4}, {3, 7}, {5, 20}, {6, 10}} {
			for _, step := range []float64{-0.5, 0.5} {
				var ps []float64
				for range w[1] {
					ps = append(ps, c) // flat: no side
				}
				ps = append(ps, c+step*c) // a move sets the side
				for range 2 * w[1] {
					ps = append(ps, c) // back to flat: one real crossing, then equal
				}
				want := exactCrossoverRef(w[0], w[1], ps)
				got := feed(NewMACrossover(w[0], w[1]), prices(ps...))
				t.Logf("price %v, %d/%d, step %v", c, w[0], w[1], step)
				optest.RequireOutputs(t, want, got)
				for _, o := range want {
					if !o.IsNone() {
						crossings++
					}
				}
			}
		}
	}
	if crossings == 0 {
		t.Fatal("the reference saw no crossing: the series do not exercise the side")
	}
}
