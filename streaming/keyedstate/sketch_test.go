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
