package fintech

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBollingerBandsAfterAnOutlierLeaves: once a price that outweighed
// the rest of the window by many orders of magnitude (a bad tick of 1e8
// among prices near 100) has left the window, the bands are those of the
// prices that stay, on every record, not only after the next periodic
// recomputation. Bug: the sliding update cancelled the outlier's squared
// deviation against itself and kept its rounding residue as the
// variance, so σ came out 15 times too wide (or 0 for a tick of 1e10)
// for up to N−1 prices.
func TestBollingerBandsAfterAnOutlierLeaves(t *testing.T) {
	const n = 20
	for _, spike := range []float64{1e8, 1e10} {
		var ticks []tick
		for i := range 3 * n {
			p := 100 + float64(i%7)/100
			if i == n+5 {
				p = spike
			}
			ticks = append(ticks, tick{p: p})
		}
		ref := bollingerRef(n, 2, Upper)
		out := feed(NewBollinger(n, 2, Upper), ticks)
		for i := 2*n + 5; i < len(ticks); i++ { // the spike has left the window
			want := ref(ticks[:i+1]).Float64()
			require.InDelta(t, want, out[i].Float64(), 1e-9, "upper band at price %d, %g left the window at %d", i, spike, 2*n+5)
		}
	}
}

// TestBollingerConstantPricesHaveZeroWidth: over a window of one repeated
// price the population standard deviation is 0, so the three bands are
// that price and %B is 0.5 (bands coinciding), on the record that fills
// the window and every later one, and also once earlier, different prices
// have left the window. Bug: the periodic recomputation divided a plain
// sum by N (20 × 0.1 summed to 2.0000000000000004), so the middle band
// came out 0.10000000000000002, σ a small positive number and %B 0.25 or
// 0.75 for a flat price of 0.1, 0.3 or 7.77.
func TestBollingerConstantPricesHaveZeroWidth(t *testing.T) {
	const n = 20
	for _, c := range []float64{0.1, 0.3, 7.77, 1e-3, 123.45} {
		for _, prefix := range [][]float64{nil, {1, 5, 2}} {
			for _, band := range []Band{Middle, Upper, Lower, PercentB} {
				var ticks []tick
				for _, p := range prefix {
					ticks = append(ticks, tick{p: p})
				}
				for range 3 * n {
					ticks = append(ticks, tick{p: c})
				}
				want := c
				if band == PercentB {
					want = 0.5
				}
				out := feed(NewBollinger(n, 2, band), ticks)
				for i := len(prefix) + n - 1; i < len(ticks); i++ {
					require.Equal(t, InsideBands, out[i].Mode(), "price %v, prefix %v, %v at record %d", c, prefix, band, i)
					require.Equal(t, want, out[i].Float64(), "price %v, prefix %v, %v at record %d", c, prefix, band, i)
				}
			}
		}
	}
}

// TestBollingerPercentBOfHugeBands: with bands so wide (a huge K) that
// upper − lower is beyond MaxFloat64 while both bands are finite, %B is
// still where the price stands between them. Bug: the width overflowed to
// +Inf and %B came out 0 for a price in the middle.
func TestBollingerPercentBOfHugeBands(t *testing.T) {
	// [0 2]: mean 1, σ 1; bands 1 ± 1e308.
	out := feed(NewBollinger(2, 1e308, PercentB), prices(0, 2))
	require.Equal(t, InsideBands, out[1].Mode())
	require.InDelta(t, 0.5, out[1].Float64(), 1e-15)
	// [4 2]: mean 3, σ 1, the price below the middle.
	out = feed(NewBollinger(2, 1e308, PercentB), prices(4, 2))
	require.Equal(t, InsideBands, out[1].Mode())
	require.InDelta(t, 0.5, out[1].Float64(), 1e-15)
}
