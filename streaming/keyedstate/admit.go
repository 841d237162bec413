package keyedstate

import (
	"hash/maphash"
	"math/bits"
)

// freqSketch estimates how often each key was used lately, for the
// cache's admission (TinyLFU): a count-min sketch of sketchRows byte
// counters per key, sketchWidth counters a row per key the cache holds,
// all halved every sample period so that old counts fade. Collisions
// only ever overestimate.
//
// The sample period adapts. TinyLFU's ten uses per cached key is too
// short when the cache holds a small part of a mildly skewed key space:
// under Zipf(1.1) keys over 10M keys with 185k cached, the keys at the
// admission boundary are used about 0.35 times a period, so their counts
// cannot tell them from the tail, and the cache hit 86.3% of lookups
// where the 185k hottest keys take 88.6%. A longer period ranks them
// (40 uses per cached key: 87.9%) but forgets a hot set that moved more
// slowly. So at every halving the period takes one step (×1.5 or ÷1.5,
// between 10 and 160 uses per cached key) in the direction that raised
// the hit ratio over the last period, and turns back when it fell: hill
// climbing, as Caffeine sizes its admission window. A simulation of the
// runtime's policy (CLOCK and this sketch, 180k of 10M keys cached, 40M
// uses from an empty cache) hit 87.2% of stationary Zipf(1.1) keys
// (fixed period: 86.1%; over the last million uses 87.9%, 86.3%), 84.8%
// (84.8%) when the whole hot set moved every 10M uses and 82.6% (83.2%)
// every 5M. BenchmarkPerEvent at 10M keys: 87.6% (86.3%).
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
	adds   int     // uses counted since the last halving
	reset  int     // uses between two halvings: period × n
	n      int     // keys the cache holds, as sized
	// The sample period's hill climbing (halve).
	period  float64 // uses per cached key between two halvings
	step    float64 // factor of the next change of period: > 1 longer, < 1 shorter
	hits    int     // cache hits since the last halving
	lastHit float64 // the hit ratio of the last period
}

const (
	sketchRows  = 4
	sketchWidth = 4
	sketchBlock = 64                       // bytes: a cache line
	sketchRowB  = sketchBlock / sketchRows // counters of a row in a block

	// The sample period, in uses per cached key: TinyLFU's at the start,
	// the bounds of the climbing, and its step.
	periodStart = 10
	periodMin   = 10
	periodMax   = 160
	periodStep  = 1.5
)

// sketchCols is the width of a sketch's rows for a cache of n keys.
func sketchCols(n int) int { return 1 << max(bits.Len(uint(max(sketchWidth*n, 1)-1)), 10) }

// newFreqSketch returns a sketch for a cache of about n keys.
func newFreqSketch[K comparable](n int) *freqSketch[K] {
	size := sketchRows * sketchCols(n)
	n = max(n, 1)
	return &freqSketch[K]{seed: maphash.MakeSeed(), blocks: make([]uint8, size),
		mask: uint64(size/sketchBlock - 1), n: n, period: periodStart, step: periodStep, reset: periodStart * n}
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
		s.halve()
	}
}

// hit counts a use that found its key cached (after add).
func (s *freqSketch[K]) hit() { s.hits++ }

// halve ages every count and moves the sample period one step: on in
// the same direction when the hit ratio of the period that ends is at
// least the last one's, back when it fell.
func (s *freqSketch[K]) halve() {
	for j, c := range s.blocks {
		s.blocks[j] = c >> 1
	}
	hit := float64(s.hits) / float64(s.adds)
	if hit < s.lastHit {
		s.step = 1 / s.step
	}
	s.lastHit = hit
	s.period = min(max(s.period*s.step, periodMin), periodMax)
	s.reset = int(s.period * float64(s.n))
	s.adds, s.hits = 0, 0
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
