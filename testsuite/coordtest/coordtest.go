package coordtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
)

// Harness is one fresh store under test plus the hooks the suite needs.
type Harness struct {
	Store coordination.Store
	// Advance lets at least d pass on the store's clock (advance a virtual
	// clock, or wait on a real one).
	Advance func(d time.Duration)
	// BreakWatches, when set, breaks every open watch stream the way the
	// backend really breaks (fault injection or a dropped connection). The
	// store need not be usable afterwards.
	BreakWatches func()
	// EventWait bounds how long the suite waits for an event or an expiry
	// to show. Default 5s.
	EventWait time.Duration
	// MaxValueSize is the largest value, in bytes, the backend documents
	// that it stores; 0 means it documents no limit. The suite checks that
	// a value of this size is stored and one byte more is refused with a
	// Fatal error.
	MaxValueSize int
	// WatchBacklog is how many live events a watcher may have queued
	// before the store breaks its stream, as a store that protects itself
	// from slow consumers does; 0 means unbounded. The suite paces writers
	// that race a watch's snapshot to under half of it, so the test
	// measures the snapshot, not which goroutine the scheduler favours.
	WatchBacklog int
}

// NewHarness returns a fresh, empty store for one subtest; cleanup goes
// through t.Cleanup.
type NewHarness func(t *testing.T) Harness

// Run runs the whole suite.
func Run(t *testing.T, newHarness NewHarness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"LeaseTTLPositive", testLeaseTTL},
		{"CreateIfAbsent", testCreate},
		{"UpdateCAS", testUpdate},
		{"GetAbsentIsNotFound", testGetAbsent},
		{"DeleteGuardedAndVacuous", testDelete},
		{"RevisionsStrictlyIncreasePerKey", testRevisions},
		{"KeyspacesAreIndependent", testKeyspaces},
		{"ListPrefixLiveSorted", testList},
		{"WatchSnapshotThenLive", testWatch},
		{"WatchCloseAndCancel", testWatchClose},
		{"WatchBrokenIsRetryable", testWatchBroken},
		{"EphemeralExpiry", testExpiry},
		{"EphemeralUpdateRearms", testRearm},
		{"DurableNeverExpires", testDurable},
		{"InvalidKeyIsFatal", testInvalidKey},
		{"ConcurrentCreateOneWinner", testConcurrentCreate},
		{"ConcurrentUpdateOneWinnerPerRevision", testConcurrentUpdate},
		{"ValuesAreCopied", testValuesCopied},
		{"UpdateAtTombstoneRevisionLoses", testTombstoneRevision},
		{"UpdateAtExpiryRevisionLoses", testExpiryRevision},
		{"WatchDeleteDuringSnapshot", testWatchDeleteDuringSnapshot},
		{"ListExactUnderConcurrentUpdates", testListUnderUpdates},
		{"WatchSnapshotCompleteUnderConcurrentUpdates", testWatchSnapshotUnderUpdates},
		{"WatchConvergesToListUnderConcurrentWriters", testWatchConverges},
		{"ReadThenCASOneWinnerPerRevision", testReadThenCAS},
		{"OddKeysRefusedOrExact", testOddKeys},
		{"LargeValuesStoredOrFatal", testLargeValues},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if h.EventWait == 0 {
				h.EventWait = 5 * time.Second
			}
			tc.fn(t, h)
		})
	}
}

const (
	dur = coordination.Durable
	eph = coordination.Ephemeral
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// ck lets a test pass a (CasOutcome, error) pair straight to a check.
type ck struct{ t *testing.T }

func (k ck) win(o coordination.CasOutcome, err error) coordination.Revision {
	t := k.t
	t.Helper()
	require.NoError(t, err)
	require.True(t, o.Won(), "expected a win, got %v", o)
	require.NotZero(t, o.Revision(), "a landed write must carry a non-zero revision")
	return o.Revision()
}

func (k ck) lose(o coordination.CasOutcome, err error) {
	t := k.t
	t.Helper()
	require.NoError(t, err, "losing a precondition is an outcome, not an error")
	require.False(t, o.Won(), "expected Lost, got %v", o)
}

func requireAbsent(t *testing.T, s coordination.Store, ks coordination.Keyspace, key string) {
	t.Helper()
	_, err := s.Get(ctx(t), ks, key)
	require.ErrorIs(t, err, coordination.ErrNotFound)
	require.False(t, coordination.IsRetryable(err) || coordination.IsFatal(err), "not-found must be neither retryable nor fatal: %v", err)
}

func requireValue(t *testing.T, s coordination.Store, ks coordination.Keyspace, key, want string, rev coordination.Revision) {
	t.Helper()
	e, err := s.Get(ctx(t), ks, key)
	require.NoError(t, err)
	require.Equal(t, key, e.Key)
	require.Equal(t, want, string(e.Value))
	require.Equal(t, rev, e.Revision)
}

func testLeaseTTL(t *testing.T, h Harness) {
	require.Positive(t, h.Store.LeaseTTL())
}

func testCreate(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	for _, ks := range []coordination.Keyspace{dur, eph} {
		rev := k.win(s.Create(c, ks, "a.b", []byte("v1")))
		requireValue(t, s, ks, "a.b", "v1", rev)
		k.lose(s.Create(c, ks, "a.b", []byte("v2")))
		requireValue(t, s, ks, "a.b", "v1", rev)
	}
}

func testUpdate(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	for _, ks := range []coordination.Keyspace{dur, eph} {
		k.lose(s.Update(c, ks, "absent", []byte("x"), 1))
		requireAbsent(t, s, ks, "absent")
		r1 := k.win(s.Create(c, ks, "k", []byte("v1")))
		r2 := k.win(s.Update(c, ks, "k", []byte("v2"), r1))
		require.Greater(t, r2, r1)
		requireValue(t, s, ks, "k", "v2", r2)
		k.lose(s.Update(c, ks, "k", []byte("stale"), r1))
		requireValue(t, s, ks, "k", "v2", r2)
		k.lose(s.Update(c, ks, "k", []byte("future"), r2+1000))
		requireValue(t, s, ks, "k", "v2", r2)
	}
}

func testGetAbsent(t *testing.T, h Harness) {
	requireAbsent(t, h.Store, dur, "never.written")
	requireAbsent(t, h.Store, eph, "never.written")
}

func testDelete(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	for _, ks := range []coordination.Keyspace{dur, eph} {
		// Absent key: wins vacuously, guarded or not.
		o, err := s.Delete(c, ks, "none", 0)
		require.NoError(t, err)
		require.True(t, o.Won(), "deleting an absent key wins vacuously")
		o, err = s.Delete(c, ks, "none", 7)
		require.NoError(t, err)
		require.True(t, o.Won(), "guarded delete of an absent key wins vacuously")

		r1 := k.win(s.Create(c, ks, "g", []byte("v1")))
		r2 := k.win(s.Update(c, ks, "g", []byte("v2"), r1))
		k.lose(s.Delete(c, ks, "g", r1))
		requireValue(t, s, ks, "g", "v2", r2)
		rd := k.win(s.Delete(c, ks, "g", r2))
		require.Greater(t, rd, r2, "a delete's revision is above every earlier one of the key")
		requireAbsent(t, s, ks, "g")
		k.lose(s.Update(c, ks, "g", []byte("zombie"), r2))
		requireAbsent(t, s, ks, "g")

		ru := k.win(s.Create(c, ks, "u", []byte("v")))
		rud := k.win(s.Delete(c, ks, "u", 0))
		require.Greater(t, rud, ru)
		requireAbsent(t, s, ks, "u")
	}
}

func testRevisions(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	var last coordination.Revision
	step := func(r coordination.Revision) {
		t.Helper()
		require.Greater(t, r, last, "revision must strictly increase per key")
		last = r
	}
	r := k.win(s.Create(c, dur, "r", []byte("0")))
	step(r)
	for i := range 5 {
		r = k.win(s.Update(c, dur, "r", fmt.Appendf(nil, "%d", i+1), r))
		step(r)
	}
	step(k.win(s.Delete(c, dur, "r", r)))
	r = k.win(s.Create(c, dur, "r", []byte("again")))
	step(r)
	step(k.win(s.Delete(c, dur, "r", 0)))
	step(k.win(s.Create(c, dur, "r", []byte("third"))))
}

func testKeyspaces(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	rd := k.win(s.Create(c, dur, "same", []byte("durable")))
	requireAbsent(t, s, eph, "same")
	re := k.win(s.Create(c, eph, "same", []byte("ephemeral")))
	requireValue(t, s, dur, "same", "durable", rd)
	requireValue(t, s, eph, "same", "ephemeral", re)
	k.win(s.Delete(c, eph, "same", 0))
	requireValue(t, s, dur, "same", "durable", rd)
}

func testList(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	want := map[string]coordination.Revision{}
	for _, key := range []string{"p.c", "p.a", "p.b"} {
		want[key] = k.win(s.Create(c, dur, key, []byte("v-"+key)))
	}
	k.win(s.Create(c, dur, "q.a", []byte("other")))
	k.win(s.Create(c, eph, "p.z", []byte("other keyspace")))
	rd := k.win(s.Create(c, dur, "p.d", []byte("deleted")))
	k.win(s.Delete(c, dur, "p.d", rd))
	want["p.b"] = k.win(s.Update(c, dur, "p.b", []byte("v-p.b2"), want["p.b"]))

	got, err := s.List(c, dur, "p.")
	require.NoError(t, err)
	keys := make([]string, len(got))
	for i, e := range got {
		keys[i] = e.Key
		require.Equal(t, want[e.Key], e.Revision, "listing revision of %s", e.Key)
	}
	require.Equal(t, []string{"p.a", "p.b", "p.c"}, keys, "listing is the live keys under the prefix, sorted")
	require.Equal(t, "v-p.b2", string(got[1].Value))

	all, err := s.List(c, dur, "")
	require.NoError(t, err)
	require.Len(t, all, 4)
	none, err := s.List(c, dur, "nothing.")
	require.NoError(t, err)
	require.Empty(t, none)
}

// collector drains a watcher on its own goroutine.
type collector struct {
	mu     sync.Mutex
	events []coordination.WatchEvent
	done   chan struct{}
}

func collect(w coordination.Watcher) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ev := range w.Events() {
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) snapshot() []coordination.WatchEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]coordination.WatchEvent(nil), c.events...)
}

func (c *collector) waitLen(t *testing.T, n int, wait time.Duration) []coordination.WatchEvent {
	t.Helper()
	require.Eventually(t, func() bool { return len(c.snapshot()) >= n }, wait, 2*time.Millisecond,
		"waiting for %d watch events", n)
	return c.snapshot()
}

func testWatch(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	ra := k.win(s.Create(c, dur, "w.a", []byte("a1")))
	rb := k.win(s.Create(c, dur, "w.b", []byte("b1")))
	rg := k.win(s.Create(c, dur, "w.gone", []byte("x")))
	k.win(s.Delete(c, dur, "w.gone", rg))
	k.win(s.Create(c, dur, "other.a", []byte("no")))

	w, err := s.Watch(c, dur, "w.")
	require.NoError(t, err)
	defer w.Close()
	col := collect(w)

	evs := col.waitLen(t, 3, h.EventWait)
	require.Equal(t, coordination.EventSnapshotDone, evs[2].Kind, "snapshot of two live keys, then SnapshotDone: %v", evs)
	snap := map[string]coordination.Entry{}
	for _, ev := range evs[:2] {
		require.Equal(t, coordination.EventPut, ev.Kind)
		snap[ev.Key] = ev.Entry
	}
	require.Equal(t, ra, snap["w.a"].Revision)
	require.Equal(t, "a1", string(snap["w.a"].Value))
	require.Equal(t, rb, snap["w.b"].Revision)

	ra2 := k.win(s.Update(c, dur, "w.a", []byte("a2"), ra))
	k.win(s.Create(c, dur, "other.b", []byte("filtered out")))
	rbd := k.win(s.Delete(c, dur, "w.b", rb))
	rc := k.win(s.Create(c, dur, "w.c", []byte("c1")))
	k.win(s.Create(c, eph, "w.eph", []byte("other keyspace")))

	evs = col.waitLen(t, 6, h.EventWait)
	live := evs[3:6]
	require.Equal(t, coordination.WatchEvent{Kind: coordination.EventPut, Entry: coordination.Entry{Key: "w.a", Value: []byte("a2"), Revision: ra2}}, live[0])
	require.Equal(t, coordination.EventDelete, live[1].Kind)
	require.Equal(t, "w.b", live[1].Key)
	require.Equal(t, rbd, live[1].Revision, "a delete event carries the delete's own revision")
	require.Equal(t, coordination.EventPut, live[2].Kind)
	require.Equal(t, "w.c", live[2].Key)
	require.Equal(t, rc, live[2].Revision)
	// Nothing else arrives: the other prefix and keyspace are filtered.
	k.win(s.Create(c, dur, "w.z", []byte("fence")))
	evs = col.waitLen(t, 7, h.EventWait)
	require.Equal(t, "w.z", evs[6].Key, "events outside the prefix or keyspace leaked: %v", evs)
}

func testWatchClose(t *testing.T, h Harness) {
	s := h.Store
	w, err := s.Watch(ctx(t), dur, "")
	require.NoError(t, err)
	col := collect(w)
	col.waitLen(t, 1, h.EventWait)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close is idempotent")
	select {
	case <-col.done:
	case <-time.After(h.EventWait):
		t.Fatal("Close did not close Events")
	}
	require.NoError(t, w.Err(), "a watch ended by Close reports no error")

	c2, cancel := context.WithCancel(context.Background())
	w2, err := s.Watch(c2, dur, "")
	require.NoError(t, err)
	col2 := collect(w2)
	col2.waitLen(t, 1, h.EventWait)
	cancel()
	select {
	case <-col2.done:
	case <-time.After(h.EventWait):
		t.Fatal("cancelling the watch context did not close Events")
	}
	require.NoError(t, w2.Err(), "a watch ended by its context reports no error")
	require.NoError(t, w2.Close())
}

func testWatchBroken(t *testing.T, h Harness) {
	k := ck{t}
	if h.BreakWatches == nil {
		t.Skip("backend offers no way to break a watch stream")
	}
	s, c := h.Store, ctx(t)
	k.win(s.Create(c, dur, "b.a", []byte("v")))
	w, err := s.Watch(c, dur, "b.")
	require.NoError(t, err)
	defer w.Close()
	col := collect(w)
	col.waitLen(t, 2, h.EventWait)
	h.BreakWatches()
	select {
	case <-col.done:
	case <-time.After(h.EventWait):
		t.Fatal("a broken watch stream did not close Events")
	}
	require.Error(t, w.Err())
	require.True(t, coordination.IsRetryable(w.Err()), "a broken watch is Retryable, got %v", w.Err())
}

func testExpiry(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	ttl := s.LeaseTTL()
	w, err := s.Watch(c, eph, "lease.")
	require.NoError(t, err)
	defer w.Close()
	col := collect(w)
	col.waitLen(t, 1, h.EventWait)

	r := k.win(s.Create(c, eph, "lease.x", []byte("held")))
	col.waitLen(t, 2, h.EventWait)
	requireValue(t, s, eph, "lease.x", "held", r)

	h.Advance(ttl / 2)
	requireValue(t, s, eph, "lease.x", "held", r)
	h.Advance(ttl)
	require.Eventually(t, func() bool {
		_, err := s.Get(c, eph, "lease.x")
		return errors.Is(err, coordination.ErrNotFound)
	}, h.EventWait, 5*time.Millisecond, "ephemeral key must read absent after its TTL")
	evs := col.waitLen(t, 3, h.EventWait)
	require.Equal(t, coordination.EventDelete, evs[2].Kind, "expiry reaches watchers as a delete: %v", evs)
	require.Equal(t, "lease.x", evs[2].Key)
	require.Greater(t, evs[2].Revision, r, "the expiry's revision is above the key's earlier ones")

	l, err := s.List(c, eph, "lease.")
	require.NoError(t, err)
	require.Empty(t, l, "expired keys are not listed")
	k.lose(s.Update(c, eph, "lease.x", []byte("zombie renew"), r))
	r2 := k.win(s.Create(c, eph, "lease.x", []byte("again")))
	require.Greater(t, r2, evs[2].Revision)
}

func testRearm(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	ttl := s.LeaseTTL()
	r := k.win(s.Create(c, eph, "hb", []byte("0")))
	// Renew three times at 60% of the TTL: 180% of a TTL after creation the
	// key must still be live, because every write re-armed the clock.
	for i := range 3 {
		h.Advance(ttl * 6 / 10)
		var err error
		o, err := s.Update(c, eph, "hb", fmt.Appendf(nil, "%d", i+1), r)
		r = k.win(o, err)
	}
	requireValue(t, s, eph, "hb", "3", r)
	h.Advance(ttl + ttl/10)
	require.Eventually(t, func() bool {
		_, err := s.Get(c, eph, "hb")
		return errors.Is(err, coordination.ErrNotFound)
	}, h.EventWait, 5*time.Millisecond, "key must expire a TTL after its last write")
}

func testDurable(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	r := k.win(s.Create(c, dur, "keep", []byte("v")))
	h.Advance(2*s.LeaseTTL() + s.LeaseTTL()/2)
	requireValue(t, s, dur, "keep", "v", r)
}

func testInvalidKey(t *testing.T, h Harness) {
	s, c := h.Store, ctx(t)
	for _, key := range []string{"", "a..b", "sp ace", ".lead", "trail.", "a*b", "a>b"} {
		_, err := s.Create(c, dur, key, []byte("v"))
		require.Error(t, err, "key %q", key)
		require.True(t, coordination.IsFatal(err), "invalid key %q must be Fatal, got %v", key, err)
	}
	_, err := s.List(c, dur, "noDot")
	require.True(t, coordination.IsFatal(err), "prefix without trailing dot must be Fatal, got %v", err)
}

func testConcurrentCreate(t *testing.T, h Harness) {
	s, c := h.Store, ctx(t)
	const n = 8
	var wg sync.WaitGroup
	wins := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			o, err := s.Create(c, eph, "race", fmt.Appendf(nil, "%d", i))
			wins[i], errs[i] = o.Won(), err
		})
	}
	wg.Wait()
	winners := 0
	for i := range n {
		require.NoError(t, errs[i])
		if wins[i] {
			winners++
		}
	}
	require.Equal(t, 1, winners, "exactly one concurrent create wins")
}

func testConcurrentUpdate(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	r0 := k.win(s.Create(c, dur, "cas", []byte("0")))
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []int
	for i := range n {
		wg.Go(func() {
			o, err := s.Update(c, dur, "cas", fmt.Appendf(nil, "%d", i), r0)
			if err != nil {
				t.Errorf("update: %v", err)
				return
			}
			if o.Won() {
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, winners, 1, "exactly one CAS at one revision wins")
	e, err := s.Get(c, dur, "cas")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(winners[0]), string(e.Value))
}

func testValuesCopied(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	v := []byte("original")
	r := k.win(s.Create(c, dur, "copy", v))
	copy(v, "XXXXXXXX")
	e, err := s.Get(c, dur, "copy")
	require.NoError(t, err)
	require.Equal(t, "original", string(e.Value), "the store must not retain the caller's slice")
	copy(e.Value, "YYYYYYYY")
	requireValue(t, s, dur, "copy", "original", r)
	require.True(t, bytes.Equal(e.Value, []byte("YYYYYYYY")))

	// The same for every other way a value goes in or comes out: Update's
	// argument, a listing's entries, and watch events (snapshot and live),
	// which no other watcher may see edited either.
	w1, err := s.Watch(c, dur, "")
	require.NoError(t, err)
	defer w1.Close()
	w2, err := s.Watch(c, dur, "")
	require.NoError(t, err)
	defer w2.Close()
	next := func(w coordination.Watcher, kind coordination.EventKind) coordination.WatchEvent {
		t.Helper()
		for {
			select {
			case ev, ok := <-w.Events():
				require.True(t, ok, "watch ended: %v", w.Err())
				if ev.Kind == kind {
					return ev
				}
			case <-time.After(h.EventWait):
				t.Fatalf("no %v event within %v", kind, h.EventWait)
			}
		}
	}
	ev := next(w1, coordination.EventPut)
	require.Equal(t, "original", string(ev.Value))
	copy(ev.Value, "SSSSSSSS")
	require.Equal(t, "original", string(next(w2, coordination.EventPut).Value), "a watch snapshot event shares its value")
	requireValue(t, s, dur, "copy", "original", r)
	next(w1, coordination.EventSnapshotDone)
	next(w2, coordination.EventSnapshotDone)

	v2 := []byte("updated!")
	r2 := k.win(s.Update(c, dur, "copy", v2, r))
	copy(v2, "XXXXXXXX")
	requireValue(t, s, dur, "copy", "updated!", r2)

	ev = next(w1, coordination.EventPut)
	require.Equal(t, "updated!", string(ev.Value))
	copy(ev.Value, "LLLLLLLL")
	requireValue(t, s, dur, "copy", "updated!", r2)
	require.Equal(t, "updated!", string(next(w2, coordination.EventPut).Value), "a live watch event shares its value with another watcher")

	l, err := s.List(c, dur, "")
	require.NoError(t, err)
	require.Len(t, l, 1)
	copy(l[0].Value, "ZZZZZZZZ")
	requireValue(t, s, dur, "copy", "updated!", r2)
}
