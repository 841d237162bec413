package keyedstate

import (
	"hash/maphash"
	"math/bits"
)

// freqSketch estimates how often each key was used lately, for the
// cache's admission (TinyLFU): a count-min sketch of sketchRows byte
// counters per key, sketchWidth counters a row per key the cache holds,
// all halved every ten uses per key the cache holds so that old counts
// fade (a counter gathers 10/sketchWidth uses of other keys on average
// before a halving). Collisions only ever overestimate.
//
// The sketch is blocked (as Caffeine's is): a key's counters are in one
// 64-byte block, one in each of its four 16-byte rows, so counting a use
// touches one cache line, not four. The sketch of a cache of a few
// hundred thousand keys is megabytes, outside the processor's caches, and
// the four misses of independent rows were a tenth of a cached record's
// cost. Not safe for concurrent use (r.mu held).
type freqSketch[K comparable] struct {
	seed   maphash.Seed
	blocks []uint8 // sketchBlock bytes per block
	mask   uint64  // blocks − 1
	adds   int
	reset  int
}

const (
	sketchRows  = 4
	sketchWidth = 4
	sketchBlock = 64                       // bytes: a cache line
	sketchRowB  = sketchBlock / sketchRows // counters of a row in a block
)

// sketchCols is the width of a sketch's rows for a cache of n keys.
func sketchCols(n int) int { return 1 << max(bits.Len(uint(max(sketchWidth*n, 1)-1)), 10) }

// newFreqSketch returns a sketch for a cache of about n keys.
func newFreqSketch[K comparable](n int) *freqSketch[K] {
	size := sketchRows * sketchCols(n)
	return &freqSketch[K]{seed: maphash.MakeSeed(), blocks: make([]uint8, size),
		mask: uint64(size/sketchBlock - 1), reset: 10 * max(n, 1)}
}

// sketchBytes is the memory of a sketch for a cache of n keys.
func sketchBytes(n int) int64 {
	return int64(sketchRows * sketchCols(n))
}

func (s *freqSketch[K]) hash(k K) uint64 { return maphash.Comparable(s.seed, k) }

// counters returns the block of the key of hash h and the offsets of its
// counters in it: the block from the low bits, a counter in each row from
// four bits of the high half each.
func (s *freqSketch[K]) counters(h uint64) (block []uint8, at [sketchRows]uint8) {
	b := (h & s.mask) * sketchBlock
	block = s.blocks[b : b+sketchBlock : b+sketchBlock]
	for i := range at {
		at[i] = uint8(i*sketchRowB) + uint8(h>>(32+4*i))&(sketchRowB-1)
	}
	return block, at
}

// add counts one use of the key of hash h.
func (s *freqSketch[K]) add(h uint64) {
	block, at := s.counters(h)
	for _, i := range at {
		if c := &block[i]; *c < 255 {
			*c++
		}
	}
	if s.adds++; s.adds >= s.reset {
		s.adds = 0
		for j, c := range s.blocks {
			s.blocks[j] = c >> 1
		}
	}
}

// estimate is how often the key of hash h was used lately, at most.
func (s *freqSketch[K]) estimate(h uint64) uint8 {
	block, at := s.counters(h)
	est := uint8(255)
	for _, i := range at {
		est = min(est, block[i])
	}
	return est
}
