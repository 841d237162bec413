package fintech

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// TestWindowSumAfterAHugeValueLeaves: a rolling window's sum once a value
// that outweighed the rest by many orders of magnitude has left it is the
// sum of what stays. Bug: the compensated running sum kept a rounding
// residue of the large value, so a VWAP window of zero-volume trades
// emitted residue/residue (21.33 for trades at 50), and one of small
// volumes a wrong price.
func TestWindowSumAfterAHugeValueLeaves(t *testing.T) {
	// A window of three zero-volume trades emits nothing, wherever the
	// large volume sat in the ring.
	for _, lead := range [][]tick{
		{{45, 1}, {91, 0.1}, {80, 8e20}},
		{{80, 8e20}, {45, 1}, {91, 0.1}},
		{{45, 1}, {80, 8e20}, {91, 0.1}},
	} {
		out := feed(NewVWAP(3), append(lead, tick{50, 0}, tick{50, 0}, tick{50, 0}))
		require.Equal(t, streaming.NoOutput(), out[len(out)-1], "after %v then three trades at 50 of volume 0", lead)
	}
	// A window of small trades after it gives their VWAP.
	ticks := []tick{{45, 1}, {91, 0.1}, {80, 8e20}, {50, 0.3}, {52, 0.1}, {51, 0.7}}
	out := feed(NewVWAP(3), ticks)
	want := (50*0.3 + 52*0.1 + 51*0.7) / (0.3 + 0.1 + 0.7)
	require.InDelta(t, want, out[len(out)-1].Float64(), 1e-9*want, "VWAP of the last three trades of %v", ticks)

	// The crossover's moving averages, over the same windows: a price
	// spike of 1e20 leaves the slow window, and the means are the prices'
	// again (a residue would make the fast mean cross the slow one).
	c := NewMACrossover(2, 3)
	for i, p := range []float64{10, 1e20, 10, 10, 10} {
		c.Eval([]streaming.Computed{streaming.Float(p)}, int64(i))
	}
	require.Equal(t, 10.0, c.fast.mean())
	require.Equal(t, 10.0, c.slow.mean())
}

// TestVWAPOfAFlatPriceIsThatPrice: trades all at one price average to
// exactly that price: cumulative at any volumes, rolling at volumes whose
// products are exact. Bug: the VWAP divided the rounded values of the two
// sums (and, cumulative, summed rounded products), so a flat 0.1 came out
// 0.10000000000000002 or 0.09999999999999999 and a flat 7.77
// 7.769999999999999.
func TestVWAPOfAFlatPriceIsThatPrice(t *testing.T) {
	for _, n := range []int{0, 3, 5, 20} {
		for _, c := range []float64{0.1, 0.3, 7.77, 123.45} {
			vols := []float64{1, 2, 4, 0.5}
			if n == 0 {
				vols = append(vols, 3, 0.7, 1234, 1e-3)
			}
			for _, v := range vols {
				ts := make([]tick, 60)
				for i := range ts {
					ts[i] = tick{p: c, v: v}
				}
				for i, o := range feed(NewVWAP(n), ts) {
					if o.IsNone() || o.Float64() != c {
						t.Fatalf("VWAP(%d) of price %v at volume %v: record %d emitted %v", n, c, v, i, o)
					}
				}
			}
		}
	}
}
