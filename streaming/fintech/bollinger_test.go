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
