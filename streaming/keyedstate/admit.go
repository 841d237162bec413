package keyedstate

import (
	"hash/maphash"
	"math/bits"
)

// freqSketch estimates how often each key was used lately, for the
// cache's admission (TinyLFU): a count-min sketch of sketchRows rows of
// byte counters, sketchWidth per key the cache holds, all halved every
// ten uses per key the cache holds so that old counts fade (a counter
// gathers 10/sketchWidth uses of other keys on average before a halving).
// Collisions only ever overestimate. Not safe for concurrent use (r.mu
// held).
type freqSketch[K comparable] struct {
	seed  maphash.Seed
	rows  [sketchRows][]uint8
	mask  uint64
	adds  int
	reset int
}

const (
	sketchRows  = 4
	sketchWidth = 4
)

// sketchCols is the width of a sketch's rows for a cache of n keys.
func sketchCols(n int) int { return 1 << max(bits.Len(uint(max(sketchWidth*n, 1)-1)), 10) }

// newFreqSketch returns a sketch for a cache of about n keys.
func newFreqSketch[K comparable](n int) *freqSketch[K] {
	width := sketchCols(n)
	s := &freqSketch[K]{seed: maphash.MakeSeed(), mask: uint64(width - 1), reset: 10 * max(n, 1)}
	for i := range s.rows {
		s.rows[i] = make([]uint8, width)
	}
	return s
}

// sketchBytes is the memory of a sketch for a cache of n keys.
func sketchBytes(n int) int64 {
	return int64(sketchRows * sketchCols(n))
}

func (s *freqSketch[K]) hash(k K) uint64 { return maphash.Comparable(s.seed, k) }

// index is the counter of row i for hash h.
func (s *freqSketch[K]) index(h uint64, i int) uint64 {
	return (h + uint64(i)*(h>>32|1)) & s.mask
}

// add counts one use of the key of hash h.
func (s *freqSketch[K]) add(h uint64) {
	for i := range s.rows {
		if c := &s.rows[i][s.index(h, i)]; *c < 255 {
			*c++
		}
	}
	if s.adds++; s.adds >= s.reset {
		s.adds = 0
		for i := range s.rows {
			for j, c := range s.rows[i] {
				s.rows[i][j] = c >> 1
			}
		}
	}
}

// estimate is how often the key of hash h was used lately, at most.
func (s *freqSketch[K]) estimate(h uint64) uint8 {
	est := uint8(255)
	for i := range s.rows {
		est = min(est, s.rows[i][s.index(h, i)])
	}
	return est
}
