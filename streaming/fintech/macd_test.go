package fintech

import (
	"testing"

	"github.com/tflo-io/tflo/streaming"
)

// TestMACDFlatPricesAreNeutral: over a flat market every EMA is the price,
// the MACD line, its signal and the histogram are 0 and the trend is
// Neutral, from the first output on, with either warm-up policy. Bug: with
// warmup: partial the line was the difference of means of different
// counts of one price (0.1 three times averages to 0.10000000000000002),
// a few units of rounding, and the trend followed the sign of that
// rounding: Bullish or Bearish on most records of a flat market, for good.
func TestMACDFlatPricesAreNeutral(t *testing.T) {
	for _, c := range []float64{0.1, 0.3, 0.7, 1.1, 2.675, 7.77, 19.99, 100.01, 12345.67} {
		for _, per := range [][3]int{{12, 26, 9}, {3, 7, 4}, {5, 35, 5}, {2, 3, 2}, {50, 200, 30}} {
			for _, w := range []streaming.Warmup{streaming.WarmupFull, streaming.WarmupPartial} {
				for _, comp := range []MACDComponent{MACDLine, MACDSignal, MACDHistogram} {
					m := NewMACD(per[0], per[1], per[2], comp).WithWarmup(w)
					for i := range 3 * (per[1] + per[2]) {
						o := m.Eval([]streaming.Computed{f(c)}, int64(i))
						if o.IsNone() {
							continue
						}
						if o.Mode() != Neutral {
							t.Fatalf("price %v, MACD %v %v warm-up %v: record %d has trend %v (%v), want neutral",
								c, per, comp, w, i, o.Mode(), o)
						}
					}
				}
			}
		}
	}
}
