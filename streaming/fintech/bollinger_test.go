package fintech

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
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

// TestBollingerBandsAfterOutliersLeaveOneAfterAnother: outliers of
// decreasing size (about 1e9, 7e5 and 800 among zeros, each leaving less
// than 2^-20 of the squared deviation before it but together all of it)
// leave the window on consecutive prices; the bands are then those of the
// prices that stay. Bug: each departure was compared with the m2 just
// before it only, so the updates' rounding relative to the first outlier
// stayed as the variance: a window of one 1.7 among zeros had σ 1.64
// instead of 0.56, and a window of zeros σ 1.54 and the middle band
// -3.3e-9, until the next periodic recomputation.
func TestBollingerBandsAfterOutliersLeaveOneAfterAnother(t *testing.T) {
	const n = 8
	r := 700.3
	ticks := prices(r*r*r*1.37, r*r*1.21, r*1.13, 1.7)
	for range 2*n - 4 {
		ticks = append(ticks, tick{p: 0})
	}
	for _, band := range []Band{Upper, Lower, Middle} {
		ref := bollingerRef(n, 2, band)
		out := feed(NewBollinger(n, 2, band), ticks)
		for i := n - 1; i < len(ticks); i++ {
			want := ref(ticks[:i+1])
			require.Equal(t, want.Mode(), out[i].Mode(), "%v at price %d", band, i)
			require.InDelta(t, want.Float64(), out[i].Float64(), 1e-9*max(1, math.Abs(want.Float64())), "%v at price %d", band, i)
		}
	}
}

// TestBollingerMigratesVersion1: a TypeVersion 1 blob (no largest m2)
// migrates through Instance.Load and continues like the uninterrupted
// node; a truncated one is refused.
func TestBollingerMigratesVersion1(t *testing.T) {
	ps := prices(10, 11, 12.5, 12, 13, 14.25, 13.5, 15, 14, 16, 9)
	want := feed(NewBollinger(4, 2, PercentB), ps)
	old := NewBollinger(4, 2, PercentB)
	feed(old, ps[:6])
	v2, err := old.Save()
	require.NoError(t, err)
	// Version 1 is version 2 without the largest m2 after m2: the ring of
	// 4 values ends the blob, m2 and the largest m2 before it.
	v1 := append(bytes.Clone(v2[:len(v2)-4*8-8]), v2[len(v2)-4*8:]...)
	g, err := streaming.NewBuilder().Input("p").Node("bb", func() streaming.Operator { return NewBollinger(4, 2, PercentB) }, "p").Build()
	require.NoError(t, err)
	saved, err := streaming.NewBuilder().Input("p").Node("bb", func() streaming.Operator { return &savedAs{name: "bollinger", version: 1, blob: v1} }, "p").Build()
	require.NoError(t, err)
	blob, err := saved.NewInstance().Save()
	require.NoError(t, err)
	in := g.NewInstance()
	require.NoError(t, in.Load(blob))
	for i, p := range ps[6:] {
		in.Eval(int64(6+i), f(p.p))
		require.Equal(t, want[6+i], in.Output(0), "price %d", 6+i)
	}
	_, err = NewBollinger(4, 2, PercentB).Migrate(1, v1[:20])
	require.ErrorIs(t, err, streaming.ErrCorrupt)
}

// savedAs stands in for an operator of an earlier release whose state was
// blob.
type savedAs struct {
	streaming.Base
	name    string
	version uint32
	blob    []byte
}

func (o *savedAs) Name() string        { return o.name }
func (o *savedAs) TypeVersion() uint32 { return o.version }
func (o *savedAs) Eval([]streaming.Computed, int64) streaming.NodeOutput {
	return streaming.NoOutput()
}
func (o *savedAs) Save() ([]byte, error) { return o.blob, nil }
