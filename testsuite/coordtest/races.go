package coordtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
)

// value returns n bytes that encode seed, so a value read back can be told
// apart from any other write.
func value(n int, seed string) []byte {
	if n < len(seed) {
		n = len(seed)
	}
	return append([]byte(seed), bytes.Repeat([]byte{'.'}, n-len(seed))...)
}

// testTombstoneRevision: on NATS KV an Update whose expected revision was
// the key's delete marker won and brought the deleted key back, although
// the key is absent and Update must replace only a key at that revision.
func testTombstoneRevision(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	for _, ks := range []coordination.Keyspace{dur, eph} {
		r1 := k.win(s.Create(c, ks, "tomb", []byte("v1")))
		rd := k.win(s.Delete(c, ks, "tomb", r1))
		k.lose(s.Update(c, ks, "tomb", []byte("zombie"), rd))
		requireAbsent(t, s, ks, "tomb")

		r2 := k.win(s.Create(c, ks, "tomb", []byte("v2")))
		require.Greater(t, r2, rd)
		rd2 := k.win(s.Delete(c, ks, "tomb", 0))
		k.lose(s.Update(c, ks, "tomb", []byte("zombie"), rd2))
		requireAbsent(t, s, ks, "tomb")
		k.lose(s.Update(c, ks, "tomb", []byte("zombie"), r2))
		requireAbsent(t, s, ks, "tomb")
	}
}

// testExpiryRevision: on NATS KV an Update whose expected revision was the
// key's expiry marker (the revision watchers receive with the expiry's
// delete event) won and brought the expired lease back.
func testExpiryRevision(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	m := newMirror(t, h, eph, "tx.")
	r := k.win(s.Create(c, eph, "tx.lease", []byte("held")))
	m.untilPut("tx.lease", r)
	h.Advance(s.LeaseTTL() + s.LeaseTTL()/2)
	var expiry coordination.Revision
	m.until(func(ev coordination.WatchEvent) bool {
		if ev.Kind == coordination.EventDelete && ev.Key == "tx.lease" {
			expiry = ev.Revision
			return true
		}
		return false
	})
	k.lose(s.Update(c, eph, "tx.lease", []byte("zombie renew"), expiry))
	requireAbsent(t, s, eph, "tx.lease")
	l, err := s.List(c, eph, "tx.")
	require.NoError(t, err)
	require.Empty(t, l, "an expired lease renewed at its expiry's revision came back")
}

// testWatchDeleteDuringSnapshot: the NATS KV watch dropped every delete
// that arrived before its snapshot-done marker, but nats.go ends the
// snapshot by counting messages, so the delete of a key the watch had
// already sent could arrive first and the watcher kept the key live
// forever.
func testWatchDeleteDuringSnapshot(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	const n = 1000
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("snap.k%04d", i)
		k.win(s.Create(c, dur, keys[i], value(8<<10, keys[i])))
	}
	m := newMirror(t, h, dur, "snap.")
	first := m.step()
	require.Equal(t, coordination.EventPut, first.Kind, "the snapshot of %d keys starts with a put", n)
	victim, last := first.Key, keys[n-1]
	if victim == last {
		last = keys[0]
	}
	k.win(s.Delete(c, dur, victim, 0))
	k.win(s.Delete(c, dur, last, 0))
	fence := k.win(s.Create(c, dur, "snap.zfence", []byte("fence")))
	m.untilPut("snap.zfence", fence)
	_, kept := m.view[victim]
	require.False(t, kept, "the watch sent %q in its snapshot and lost its delete", victim)
	_, kept = m.view[last]
	require.False(t, kept, "the watch kept %q after its delete", last)
	require.Len(t, m.view, n-1, "999 snapshot keys less two deletes, plus the fence")
	m.requireMatchesList()
}

// updatedKeys creates n keys with 8 KiB values under prefix and starts four
// writers that keep rewriting (never deleting) the first and the last eight
// of them, where a snapshot that ends by counting messages goes wrong: one
// key is read before its update, another's old value is gone before it is
// read. With pace set, each write first takes a token from it (the caller
// hands them out); a nil pace lets the writers run free. The returned func
// stops the writers and checks they ran.
func updatedKeys(t *testing.T, s coordination.Store, prefix string, n int, pace <-chan struct{}) (keys []string, stop func()) {
	k := ck{t}
	c := ctx(t)
	keys = make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("%sk%03d", prefix, i)
		k.win(s.Create(c, dur, keys[i], value(8<<10, keys[i])))
	}
	halt := make(chan struct{})
	var halting sync.Once
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				if pace != nil {
					select {
					case <-pace:
					case <-halt:
						return
					}
				}
				select {
				case <-halt:
					return
				default:
				}
				i := rng.IntN(8)
				if rng.IntN(2) == 0 {
					i = n - 1 - i
				}
				e, err := s.Get(c, dur, keys[i])
				if err != nil {
					t.Errorf("get %s: %v", keys[i], err)
					return
				}
				if _, err := s.Update(c, dur, keys[i], value(8<<10, fmt.Sprintf("%s-%d", keys[i], w)), e.Revision); err != nil {
					t.Errorf("update %s: %v", keys[i], err)
					return
				}
				writes.Add(1)
			}
		})
	}
	halted := func() { halting.Do(func() { close(halt) }); wg.Wait() }
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		halted()
		require.Positive(t, writes.Load(), "the writers never ran")
	}
	t.Cleanup(halted)
	return keys, stop
}

// requireAllKeys fails naming the keys of want missing from got.
func requireAllKeys(t *testing.T, what string, want []string, got map[string]bool) {
	t.Helper()
	var missing []string
	for _, key := range want {
		if !got[key] {
			missing = append(missing, key)
		}
	}
	require.Empty(t, missing, "every key is live throughout, but the %s holds %d of %d", what, len(got), len(want))
}

// testListUnderUpdates: nats.go ends a KV snapshot by counting messages, so
// a List that read a key and then saw its update before the count was
// reached returned that key twice and left out a key whose old value was
// replaced before it was read. Keys that are only ever updated must be
// listed exactly once, every time.
func testListUnderUpdates(t *testing.T, h Harness) {
	s, c := h.Store, ctx(t)
	keys, stop := updatedKeys(t, s, "le.", 300, nil)
	for range 20 {
		list, err := s.List(c, dur, "le.")
		require.NoError(t, err)
		requireListing(t, list)
		listed := map[string]bool{}
		for _, e := range list {
			listed[e.Key] = true
		}
		requireAllKeys(t, "listing", keys, listed)
	}
	stop()
}

// testWatchSnapshotUnderUpdates: the same miscount ended a NATS KV watch's
// snapshot before every live key was sent, so a consumer that treats keys
// missing from the snapshot as deleted (as the split mirror does) dropped a
// live key until its next write.
func testWatchSnapshotUnderUpdates(t *testing.T, h Harness) {
	// A store with a backlog bound breaks a watch whose consumer falls that
	// far behind, and four free-running writers outpace one consumer of
	// 8 KiB events on a small machine: it would never finish a snapshot. So
	// there the writers take a token per write, a quarter of the bound per
	// watch: with what the previous watch left in flight, under half of it.
	var pace chan struct{}
	if h.WatchBacklog > 0 {
		pace = make(chan struct{}, max(1, h.WatchBacklog/4))
	}
	keys, stop := updatedKeys(t, h.Store, "ws.", 300, pace)
	for range 10 {
		m := newMirror(t, h, dur, "ws.")
		for pace != nil && len(pace) < cap(pace) {
			pace <- struct{}{}
		}
		m.until(func(ev coordination.WatchEvent) bool { return ev.Kind == coordination.EventSnapshotDone })
		inSnapshot := map[string]bool{}
		for key := range m.view {
			inSnapshot[key] = true
		}
		requireAllKeys(t, "snapshot", keys, inSnapshot)
		require.NoError(t, m.w.Close())
	}
	stop()
}

// testWatchConverges: after concurrent creates, updates and deletes stop,
// a watch started while they ran holds exactly what a listing holds.
func testWatchConverges(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	const nkeys, writers, ops = 200, 4, 150
	key := func(i int) string { return fmt.Sprintf("cv.k%03d", i) }
	for i := range nkeys {
		k.win(s.Create(c, dur, key(i), value(4<<10, key(i))))
	}
	var wg sync.WaitGroup
	var done atomic.Int64
	started := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for op := range ops {
				if w == 0 && op == ops/4 {
					close(started)
				}
				i := rng.IntN(nkeys)
				v := value(4<<10, fmt.Sprintf("%s-w%d-%d", key(i), w, op))
				var err error
				switch rng.IntN(4) {
				case 0:
					_, err = s.Create(c, dur, key(i), v)
				case 1:
					_, err = s.Delete(c, dur, key(i), 0)
				default:
					e, gerr := s.Get(c, dur, key(i))
					switch {
					case errors.Is(gerr, coordination.ErrNotFound):
					case gerr != nil:
						err = gerr
					default:
						_, err = s.Update(c, dur, key(i), v, e.Revision)
					}
				}
				if err != nil {
					t.Errorf("writer %d op %d on %s: %v", w, op, key(i), err)
					return
				}
				done.Add(1)
			}
		})
	}
	<-started
	m := newMirror(t, h, dur, "cv.")
	wg.Wait()
	require.Equal(t, int64(writers*ops), done.Load(), "every writer op ran")
	fence := k.win(s.Create(c, dur, "cv.zfence", []byte("fence")))
	m.untilPut("cv.zfence", fence)
	m.requireMatchesList()
}

// testReadThenCAS: eight writers increment one counter by reading it and
// updating at the revision read. Every expected revision has at most one
// winner, so no increment is lost.
func testReadThenCAS(t *testing.T, h Harness) {
	for _, ks := range []coordination.Keyspace{dur, eph} {
		t.Run(ks.String(), func(t *testing.T) {
			k := ck{t}
			s, c := h.Store, ctx(t)
			k.win(s.Create(c, ks, "ctr", []byte("0")))
			const writers, each = 8, 25
			var mu sync.Mutex
			winners := map[coordination.Revision]int{}
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for got := 0; got < each; {
						e, err := s.Get(c, ks, "ctr")
						if err != nil {
							t.Errorf("writer %d: get: %v", w, err)
							return
						}
						n, err := strconv.Atoi(string(e.Value))
						if err != nil {
							t.Errorf("writer %d: counter holds %q", w, e.Value)
							return
						}
						o, err := s.Update(c, ks, "ctr", strconv.AppendInt(nil, int64(n+1), 10), e.Revision)
						if err != nil {
							t.Errorf("writer %d: update: %v", w, err)
							return
						}
						if o.Won() {
							got++
							mu.Lock()
							winners[e.Revision]++
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			for rev, n := range winners {
				require.Equal(t, 1, n, "%d updates won at expected revision %d", n, rev)
			}
			e, err := s.Get(c, ks, "ctr")
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(writers*each), string(e.Value), "increments were lost")
		})
	}
}
