package keyedstate_test

import (
	"container/heap"
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// TestZipfHitRatioIsAPerfectLFUs: issue 12 asked why Zipf keys were
// slower than uniform ones and whether the cache policy was at fault. A
// skewed stream must hit the cache as often as a policy that knows every
// key's exact count since the start and keeps the most used keys (a
// perfect-history LFU, the best any policy that learns from the past can
// do without knowing the future), and more often than LRU. The runtime's
// CLOCK with TinyLFU admission does, within 2 points: here it is about
// 1 point under, as its sketch halves its counts every sample period
// (it forgets, so that it follows keys whose popularity changes; the
// perfect LFU never forgets, which pays only on a stream that never
// changes). Over 10M keys and 176k cached, as BenchmarkPerEvent
// runs it, a simulation of both gives the same 0.8360 in the first 400k
// events after the warm-up (no halving yet), against 0.8845 for the
// 176k most frequent keys: what both miss, the keys not seen often
// enough yet, no policy that learns from the past keeps.
func TestZipfHitRatioIsAPerfectLFUs(t *testing.T) {
	const keys, cached, events = 500_000, 5_000, 200_000
	g := smaGraph(t)
	rt, err := keyedstate.New[uint64](g, keyedstate.Uint64Keys{}, openDB(t), small(cached)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	capacity := rt.Capacity()
	require.InDelta(t, cached, capacity, cached/10)

	rng := rand.New(rand.NewSource(7))
	z := rand.NewZipf(rng, 1.1, 1, keys-1)
	warm := 3 * capacity
	seq := make([]uint64, warm+events)
	for i := range seq {
		seq[i] = z.Uint64()
	}
	var before keyedstate.Stats
	for i, k := range seq {
		if i == warm {
			before = rt.Stats()
		}
		applyWithCuts(t, rt, i, k)
	}
	after := rt.Stats()
	// The changed keys' bookkeeping takes a little of the cache; the
	// references get the cache's first size.
	require.InDelta(t, capacity, after.Capacity, float64(capacity)/50, "the cache kept its size")
	got := float64(after.Hits-before.Hits) / float64(events)

	lfu, lru := perfectLFUHits(seq, warm, capacity), lruHits(seq, warm, capacity)
	t.Logf("hit ratio over %d events, %d keys cached of %d: runtime %.4f, perfect-history LFU %.4f, LRU %.4f", events, capacity, keys, got, lfu, lru)
	require.GreaterOrEqual(t, got, lfu-0.02, "the runtime's cache policy misses what a perfect-history LFU keeps")
	require.Greater(t, got, lru, "skewed keys hit more than under LRU")
}

// perfectLFUHits is the hit ratio over seq[warm:] of a cache of capacity
// keys that holds the keys of the highest exact counts so far (a key
// enters when it was used more often than the least used cached one).
func perfectLFUHits(seq []uint64, warm, capacity int) float64 {
	counts := map[uint64]int{}
	in := map[uint64]*lfuItem{}
	var h lfuHeap
	hits := 0
	for i, k := range seq {
		counts[k]++
		if it, ok := in[k]; ok {
			if i >= warm {
				hits++
			}
			it.count = counts[k]
			heap.Fix(&h, it.at)
			continue
		}
		if len(h) == capacity {
			if counts[k] <= h[0].count {
				continue
			}
			delete(in, heap.Pop(&h).(*lfuItem).key)
		}
		it := &lfuItem{key: k, count: counts[k]}
		heap.Push(&h, it)
		in[k] = it
	}
	return float64(hits) / float64(len(seq)-warm)
}

type lfuItem struct {
	key       uint64
	count, at int
}

type lfuHeap []*lfuItem

func (h lfuHeap) Len() int           { return len(h) }
func (h lfuHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h lfuHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].at, h[j].at = i, j }
func (h *lfuHeap) Push(x any)        { it := x.(*lfuItem); it.at = len(*h); *h = append(*h, it) }
func (h *lfuHeap) Pop() any          { old := *h; it := old[len(old)-1]; *h = old[:len(old)-1]; return it }

// lruHits is the hit ratio over seq[warm:] of an LRU cache of capacity
// keys.
func lruHits(seq []uint64, warm, capacity int) float64 {
	type node struct {
		key        uint64
		prev, next *node
	}
	head := &node{}
	head.prev, head.next = head, head
	in := map[uint64]*node{}
	unlink := func(n *node) { n.prev.next, n.next.prev = n.next, n.prev }
	front := func(n *node) { n.prev, n.next = head, head.next; head.next.prev = n; head.next = n }
	hits := 0
	for i, k := range seq {
		if n, ok := in[k]; ok {
			if i >= warm {
				hits++
			}
			unlink(n)
			front(n)
			continue
		}
		if len(in) == capacity {
			old := head.prev
			unlink(old)
			delete(in, old.key)
		}
		n := &node{key: k}
		front(n)
		in[k] = n
	}
	return float64(hits) / float64(len(seq)-warm)
}

// TestZipfSteadyHitRatioNearTheHottestKeys: long after the warm-up, the
// cache holds nearly the hottest keys of a stationary skewed stream: it
// hits within 2 points of their share of the records. With the sample
// period fixed at TinyLFU's ten uses per cached key it hit 2.6 points
// under (0.747 against 0.773 here): the keys at the admission boundary
// were used less than once a period, so their counts could not tell them
// from the tail; the period that adapts to the hit ratio (admit.go)
// lengthens and hits 1.3 points under (0.760, in a simulation of the
// policy; six seeds varied by 0.0005).
func TestZipfSteadyHitRatioNearTheHottestKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("800k records")
	}
	const keys, warm, events = 200_000, 400_000, 400_000
	g := smaGraph(t)
	rt, err := keyedstate.New[uint64](g, keyedstate.Uint64Keys{}, openDB(t), small(2000)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	capacity := rt.Capacity()

	rng := rand.New(rand.NewSource(7))
	z := rand.NewZipf(rng, 1.1, 1, keys-1)
	var before keyedstate.Stats
	for i := range warm + events {
		if i == warm {
			before = rt.Stats()
		}
		applyWithCuts(t, rt, i, z.Uint64())
	}
	after := rt.Stats()
	got := float64(after.Hits-before.Hits) / float64(events)
	// The share of the records of the capacity hottest keys: key k is
	// drawn with a probability proportional to (k+1)^−1.1.
	var all, hottest float64
	for k := range keys {
		p := math.Pow(float64(k+1), -1.1)
		all += p
		if k < capacity {
			hottest += p
		}
	}
	t.Logf("hit ratio over records %d–%d, %d keys cached of %d: %.4f; the %d hottest keys take %.4f; sample period %.1f uses per cached key",
		warm, warm+events, capacity, keys, got, capacity, hottest/all, after.SamplePeriod)
	require.Greater(t, after.SamplePeriod, 10.0, "the sample period lengthened")
	require.GreaterOrEqual(t, got, hottest/all-0.02, "the cache does not hold the hottest keys")
}

// applyWithCuts applies record i, of key k, and saves a cut every 10,000
// records: checkpoints keep the changed keys' bookkeeping small.
func applyWithCuts(t *testing.T, rt *keyedstate.Runtime[uint64], i int, k uint64) {
	t.Helper()
	_, err := rt.Apply(k, int64(i), "seq", nil, streaming.Float(float64(i)))
	require.NoError(t, err)
	if i%10_000 == 9_999 {
		ctx := context.Background()
		c, err := rt.Cut(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Pieces(ctx, func([]byte) error { return nil }))
		c.Release(true)
	}
}
