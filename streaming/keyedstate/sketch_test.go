package keyedstate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSketchCountsInOneBlock: a key's counters are four distinct bytes of
// one 64-byte block, one in each 16-byte row, and its estimate never
// under-counts its uses (collisions only add), until the halving.
func TestSketchCountsInOneBlock(t *testing.T) {
	s := newFreqSketch[uint64](100_000)
	require.Equal(t, int(sketchBytes(100_000)), len(s.blocks))
	uses := map[uint64]int{}
	for k := range uint64(20_000) {
		h := s.hash(k)
		block, at := s.counters(h)
		require.Len(t, block, sketchBlock)
		for i, a := range at {
			require.GreaterOrEqual(t, int(a), i*sketchRowB, "counter %d of key %d is in row %d", i, k, i)
			require.Less(t, int(a), (i+1)*sketchRowB, "counter %d of key %d is in row %d", i, k, i)
		}
		n := int(k%7) + 1
		for range n {
			s.add(h)
		}
		uses[k] = n
	}
	require.Less(t, 20_000*4, s.reset, "no halving yet")
	over := 0
	for k, n := range uses {
		est := int(s.estimate(s.hash(k)))
		require.GreaterOrEqual(t, est, n, "key %d used %d times", k, n)
		if est > n {
			over++
		}
	}
	require.Less(t, over, len(uses)/10, "a tenth of the keys or more over-counted: the rows collide too often")
	// The halving ages every count.
	s.adds = s.reset - 1
	h := s.hash(3)
	before := s.estimate(h)
	s.add(h)
	require.Equal(t, (before+1)>>1, s.estimate(h))
}

// TestSamplePeriodClimbs: the sample period moves one step a halving,
// on while the hit ratio rises or holds, back when it falls, and stays
// within its bounds.
func TestSamplePeriodClimbs(t *testing.T) {
	s := newFreqSketch[uint64](1000)
	require.Equal(t, float64(periodStart), s.period)
	require.Equal(t, periodStart*1000, s.reset)
	// period runs one sample period with the given hit ratio.
	period := func(hit float64) {
		t.Helper()
		uses := s.reset
		hits := int(hit * float64(uses))
		for i := range uses {
			s.add(uint64(i))
			if i < hits {
				s.hit()
			}
		}
		require.Zero(t, s.adds, "the period ended with a halving")
	}
	period(0.80) // the first period: better than nothing, so longer
	require.InDelta(t, periodStart*periodStep, s.period, 1e-9)
	period(0.85)
	require.InDelta(t, periodStart*periodStep*periodStep, s.period, 1e-9, "the hit ratio rose: on")
	require.Equal(t, int(s.period*1000), s.reset)
	period(0.84)
	require.InDelta(t, periodStart*periodStep, s.period, 1e-9, "the hit ratio fell: back")
	period(0.86)
	require.InDelta(t, float64(periodStart), s.period, 1e-9, "it rose: on in the new direction")
	period(0.87)
	require.Equal(t, float64(periodMin), s.period, "never below the minimum")
	period(0.80) // fell: back, upwards
	require.InDelta(t, periodMin*periodStep, s.period, 1e-9)
	for i := range 12 { // rising: on, up to the maximum, and no further
		period(0.81 + float64(i)/100)
	}
	require.Equal(t, float64(periodMax), s.period, "never above the maximum")
}
