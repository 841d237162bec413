package fintech

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
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

// TestMACDFlatMarketIsExactlyZero: over one repeated price every EMA is
// exactly that price, so the line, signal and histogram are exactly 0 in
// either warm-up policy. Bug: the EMAs were seeded with a plain sum over
// the period (0.1 three times sums to 0.30000000000000004), so they
// differed from the price and from each other in the last bits and the
// line over a flat 0.1 was a few 1e-17 instead of 0.
func TestMACDFlatMarketIsExactlyZero(t *testing.T) {
	for _, c := range []float64{0.1, 0.3, 7.77, 123.45} {
		for _, w := range []streaming.Warmup{streaming.WarmupFull, streaming.WarmupPartial} {
			for _, comp := range []MACDComponent{MACDLine, MACDSignal, MACDHistogram} {
				ps := make([]float64, 60)
				for i := range ps {
					ps[i] = c
				}
				emitted := 0
				for i, got := range feed(NewMACD(3, 7, 5, comp).WithWarmup(w), prices(ps...)) {
					if got.IsNone() {
						continue
					}
					emitted++
					if got.Float64() != 0 || got.Mode() != Neutral {
						t.Fatalf("price %v, %v, %v: record %d emitted %v", c, w, comp, i, got)
					}
				}
				if emitted < 50 {
					t.Fatalf("price %v, %v, %v: only %d outputs", c, w, comp, emitted)
				}
			}
		}
	}
}

// A TypeVersion 2 MACD blob (plain seed sums), saved by the earlier
// release as NewMACD(3, 5, 2, MACDHistogram) after prices 10 11 12.5 12
// 13 (the signal EMA one line into its seed), migrates to version 3 and
// continues like an uninterrupted run.
func TestMACDMigratesVersion2(t *testing.T) {
	v2, _ := hex.DecodeString("0305020200030000000000c040405555555555952840050000000000404d40666666666666274001f0eeeeeeeeeee23f0000000000000000")
	ps := prices(10, 11, 12.5, 12, 13, 14.25, 13.5, 15, 14)
	want := feed(NewMACD(3, 5, 2, MACDHistogram), ps)
	m := NewMACD(3, 5, 2, MACDHistogram)
	v3, err := m.Migrate(2, v2)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(v3); err != nil {
		t.Fatal(err)
	}
	optest.RequireOutputs(t, want[5:], feed(m, ps[5:]))
	if _, err := m.Migrate(2, v2[:len(v2)-3]); !errors.Is(err, streaming.ErrCorrupt) {
		t.Fatalf("a truncated version 2 blob: %v, want ErrCorrupt", err)
	}
}
