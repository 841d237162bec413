package keyedstate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// TestCorruptKeyIsQuarantined: one key whose restored state does not load
// failed every record of that key, and with it the shard; now the key is
// reset and reported, and the other keys keep their state.
func TestCorruptKeyIsQuarantined(t *testing.T) {
	g := smaGraph(t)
	recs := makeRecords(5, 2000, 40)
	ref := reference(g, recs)
	keys := keysOf(recs)
	bad := keys[3]

	// A checkpoint of every key, with bad's state cut short.
	var kbs, states [][]byte
	sorted := append([]string(nil), keys...)
	slices.Sort(sorted)
	for _, k := range sorted {
		in, _ := ref.Lookup(k)
		st, err := in.Save()
		require.NoError(t, err)
		if k == bad {
			st = st[:len(st)/2]
		}
		kbs, states = append(kbs, []byte(k)), append(states, st)
	}
	pieces, err := keyedstate.PiecesOf(4<<10, kbs, states)
	require.NoError(t, err)

	var mu sync.Mutex
	var reported []string
	rt := newRuntime(t, g, openDB(t), append(small(10), keyedstate.WithQuarantine(func(key []byte, err error) {
		require.Error(t, err)
		mu.Lock()
		reported = append(reported, string(key))
		mu.Unlock()
	}))...)
	require.NoError(t, rt.Restore(context.Background(), "seq", seqCursor(0), piecesSeq(pieces)))

	// One more record for every key: all apply, bad starts afresh.
	for i, k := range keys {
		_, err := rt.Apply(k, int64(10_000+i), "seq", seqCursor(i), streaming.Float(1))
		require.NoError(t, err, "key %s", k)
	}
	require.Equal(t, []string{bad}, reported)
	require.Equal(t, uint64(1), rt.Stats().Quarantined)

	fresh := g.NewInstance()
	for i, k := range keys {
		in, _ := ref.Lookup(k)
		if k == bad {
			in = fresh
		}
		in.Eval(int64(10_000+i), streaming.Float(1))
		want, err := in.Save()
		require.NoError(t, err)
		got, found, err := rt.Get(k)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, want, got, "key %s", k)
	}
}

// TestKeyCap: random ids grew a shard's keys without bound; now a new key
// over the cap is refused and the keys held carry on.
func TestKeyCap(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	st := backends(t)["memory"]()
	rt := newRuntime(t, g, openDB(t), append(small(4), keyedstate.WithMaxKeys(10))...)
	cp := checkpointer(t, rt, st)
	require.NoError(t, rt.Restore(ctx, "", nil, piecesSeq(nil)))

	apply := func(k string, i int) error {
		_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(float64(i)))
		return err
	}
	for i := range 10 {
		require.NoError(t, apply(fmt.Sprintf("k%02d", i), i))
	}
	err := apply("intruder", 10)
	require.ErrorIs(t, err, keyedstate.ErrTooManyKeys)
	require.Contains(t, err.Error(), `"intruder"`)
	// Keys held (evicted to Badger too: the cache holds 4) still apply.
	for i := range 10 {
		require.NoError(t, apply(fmt.Sprintf("k%02d", i), 20+i))
	}
	s := rt.Stats()
	require.Equal(t, 10, s.Keys)
	require.Equal(t, uint64(1), s.KeysRefused)
	_, found, err := rt.Get("intruder")
	require.NoError(t, err)
	require.False(t, found)

	// A deleted key makes room; the count survives a restore.
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete("k03") }))
	require.NoError(t, apply("newcomer", 40))
	require.ErrorIs(t, apply("intruder", 41), keyedstate.ErrTooManyKeys)
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)

	rt2 := newRuntime(t, g, openDB(t), append(small(4), keyedstate.WithMaxKeys(10))...)
	_, err = checkpointer(t, rt2, st).Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, rt2.Stats().Keys)
	_, err = rt2.Apply("intruder", 50, "seq", seqCursor(50), streaming.Float(1))
	require.ErrorIs(t, err, keyedstate.ErrTooManyKeys)
	_, err = rt2.Apply("k03", 51, "seq", seqCursor(51), streaming.Float(1)) // deleted: new again
	require.ErrorIs(t, err, keyedstate.ErrTooManyKeys)
	_, err = rt2.Apply("newcomer", 52, "seq", seqCursor(52), streaming.Float(1))
	require.NoError(t, err)
}

// TestIdleKeysExpire: a key never seen again stayed forever; now a key
// unseen for the TTL is deleted with its state, from the cache and from
// Badger, and the checkpoint records it.
func TestIdleKeysExpire(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	st := backends(t)["memory"]()
	opts, clock := hourTTL(keyedstate.WithMaxKeys(100))
	rt := newRuntime(t, g, openDB(t), opts...)
	cp := checkpointer(t, rt, st)
	require.NoError(t, rt.Restore(ctx, "", nil, piecesSeq(nil)))
	apply := func(k string, i int) {
		_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(float64(i)))
		require.NoError(t, err)
	}
	// 20 idle keys (most evicted to Badger: the cache holds 4), then 3
	// active ones seen after 50 minutes.
	for i := range 20 {
		apply(fmt.Sprintf("idle%02d", i), i)
	}
	require.NoError(t, rt.Flush())
	clock.Advance(50 * time.Minute)
	for i := range 3 {
		apply(fmt.Sprintf("live%d", i), 100+i)
	}
	n, err := rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is an hour old yet")

	clock.Advance(20 * time.Minute)
	n, err = rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, n)
	s := rt.Stats()
	require.Equal(t, uint64(20), s.Expired)
	require.Equal(t, 3, s.Keys)
	for i := range 20 {
		_, found, err := rt.Get(fmt.Sprintf("idle%02d", i))
		require.NoError(t, err)
		require.False(t, found)
	}
	for i := range 3 {
		_, found, err := rt.Get(fmt.Sprintf("live%d", i))
		require.NoError(t, err)
		require.True(t, found)
	}

	// The checkpoint carries the deletions: a restore has the live keys only.
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	rt2 := newRuntime(t, g, openDB(t), opts...)
	_, err = checkpointer(t, rt2, st).Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, rt2.Stats().Keys)
	_, found, err := rt2.Get("idle00")
	require.NoError(t, err)
	require.False(t, found)
	// The checkpoint carries when each key was last seen: the live keys,
	// seen at 50 minutes, expire an hour later on the restored runtime
	// too, not an hour after the restore.
	n, err = rt2.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	clock.Advance(45 * time.Minute) // 115 minutes
	n, err = rt2.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Zero(t, rt2.Stats().Keys)
}

// TestRestoreWithoutLastSeen: a checkpoint written before pieces carried
// when keys were last seen (piece format 1) restores, its keys counted as
// seen at the restore.
func TestRestoreWithoutLastSeen(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	opts, clock := hourTTL()
	rt := newRuntime(t, g, openDB(t), opts...)
	state := smaState(t, g)
	require.NoError(t, rt.Restore(ctx, "seq", seqCursor(1), piecesSeq([][]byte{keyedstate.PieceV1("old", state)})))
	got, found, err := rt.Get("old")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, state, got)
	clock.Advance(59 * time.Minute)
	n, err := rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	clock.Advance(2 * time.Minute)
	n, err = rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestKeyDeletedThenSeenAgainReachesTheCut: a key deleted (expired, or
// by Tx.Delete) whose next record arrives before the next cut is saved
// by that cut with its new state. Bug: the record reloaded the key as
// absent at the current generation, nothing marked it present again,
// and the cut wrote the deletion: after a restore the key was gone.
func TestKeyDeletedThenSeenAgainReachesTheCut(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			rt := newRuntime(t, g, openDB(t), small(4)...)
			ref := streaming.NewKeyed[string](g)
			apply := func(k string, i int, v float64) {
				_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(v))
				require.NoError(t, err)
				ref.Eval(k, int64(i), streaming.Float(v))
			}
			apply("k", 0, 1)
			c0, err := rt.Cut(ctx)
			require.NoError(t, err)
			require.NoError(t, c0.Pieces(ctx, func([]byte) error { return nil }))
			c0.Release(true)
			if !cached { // push k out of the cache, into Badger
				for i := range 8 {
					apply(fmt.Sprintf("other%d", i), 1+i, 1)
				}
				require.NoError(t, rt.Flush())
			}

			require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete("k") }))
			ref.Delete("k")
			apply("k", 10, 42)
			live, found, err := rt.Get("k")
			require.NoError(t, err)
			require.True(t, found)

			c1, err := rt.Cut(ctx)
			require.NoError(t, err)
			var pieces [][]byte
			require.NoError(t, c1.Pieces(ctx, func(p []byte) error { pieces = append(pieces, slices.Clone(p)); return nil }))
			c1.Release(true)
			typ, cur := c1.Cursor()

			rt2 := newRuntime(t, g, openDB(t), small(4)...)
			require.NoError(t, rt2.Restore(ctx, typ, cur, piecesSeq(pieces)))
			got, found, err := rt2.Get("k")
			require.NoError(t, err)
			require.True(t, found, "key k, deleted and seen again before the cut, is missing after the restore")
			require.Equal(t, live, got)
			require.Equal(t, rt.Stats().Keys, rt2.Stats().Keys)
		})
	}
}

// TestPrefixHoldsNoSpilledRuns: a runtime's Badger prefix must not hold
// the lists of changed keys it spills (under "\xffkeyedstate-changed/").
// Bug: an empty prefix (or one starting with 0xff) was accepted, and
// ExpireIdle, which scans the prefix, took the spilled run's chunks for
// idle keys and deleted them: the next cut could not be saved ("has lost
// chunk"), nor could any after it. Now New refuses such a prefix.
func TestPrefixHoldsNoSpilledRuns(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	for _, prefix := range []string{"", "\xff", "\xffkeyedstate-changed/x/"} {
		t.Run(fmt.Sprintf("%q", prefix), func(t *testing.T) {
			opts, clock := hourTTL(keyedstate.WithPrefix([]byte(prefix)))
			rt, err := keyedstate.New[string](g, keyedstate.StringKeys{}, openDB(t), opts...)
			if err != nil {
				require.ErrorContains(t, err, fmt.Sprintf("prefix %q", prefix))
				return
			}
			t.Cleanup(func() { _ = rt.Close() })
			require.NoError(t, rt.Restore(ctx, "", nil, piecesSeq(nil)))
			for i := range 2000 {
				_, err := rt.Apply(fmt.Sprintf("k%04d", i), int64(i), "seq", seqCursor(i), streaming.Float(1))
				require.NoError(t, err)
			}
			require.Positive(t, rt.Stats().Spills)
			clock.Advance(2 * time.Hour)
			_, err = rt.ExpireIdle(ctx)
			require.NoError(t, err)
			require.NoError(t, rt.Flush())
			c, err := rt.Cut(ctx)
			require.NoError(t, err)
			_, err = collectPieces(t, c)
			require.NoError(t, err, "the cut after ExpireIdle")
			c.Release(true)
		})
	}
}

// TestKeyTooLongIsRefused: a key longer than Badger stores (with the
// prefix) is refused with ErrKeyTooLong, and the runtime carries on.
// Bug: its record was applied, and the write-behind flush holding it
// later failed: the runtime refused everything from then on (sticky
// error), and a checkpoint could no longer be cut.
func TestKeyTooLongIsRefused(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	opts := bigEntries()
	rt := newRuntime(t, g, openDB(t), opts...)
	huge := strings.Repeat("x", keyedstate.MaxKeyBytes)
	_, err := rt.Apply(huge, 1, "seq", seqCursor(1), streaming.Float(1))
	require.ErrorIs(t, err, keyedstate.ErrKeyTooLong)
	require.ErrorContains(t, err, "65011 bytes with the prefix")
	err = rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete(huge) })
	require.ErrorIs(t, err, keyedstate.ErrKeyTooLong)

	// The runtime carries on: records, evictions and flushes, a cut.
	for i := range 50 {
		_, err := rt.Apply(fmt.Sprintf("k%02d", i), int64(i), "seq", seqCursor(i), streaming.Float(1))
		require.NoError(t, err)
	}
	require.NoError(t, rt.Flush())
	c, err := rt.Cut(ctx)
	require.NoError(t, err)
	_, err = collectPieces(t, c)
	require.NoError(t, err)
	c.Release(true)
	require.Equal(t, 50, rt.Stats().Keys)
}

// TestExpiryScanErrorNamesTheKey: a stored value ExpireIdle cannot read
// (no header: a corrupt database) fails the sweep with an error naming
// its key. Bug: the error said only "expiry scan: stored value of 0
// bytes has no generation header", among millions of keys.
func TestExpiryScanErrorNamesTheKey(t *testing.T) {
	ctx := context.Background()
	opts, clock := hourTTL()
	db := openDB(t)
	rt := newRuntime(t, smaGraph(t), db, opts...)
	require.NoError(t, rt.Restore(ctx, "", nil, piecesSeq(nil)))
	require.NoError(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("keyedstate/broken"), []byte{}) }))
	clock.Advance(2 * time.Hour)
	_, err := rt.ExpireIdle(ctx)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.ErrorContains(t, err, `key "broken"`)
}

// TestDeleteState: DeleteState deletes every key a closed runtime left
// under its prefix (the states it wrote behind), and nothing of another
// runtime sharing the database; a prefix no runtime can have is refused.
func TestDeleteState(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	db := openDB(t)
	count := func(prefix string) int { return countKeys(t, db, prefix) }
	run := func(prefix string) *keyedstate.Runtime[string] {
		rt, err := keyedstate.New[string](g, keyedstate.StringKeys{}, db, append(small(4), keyedstate.WithPrefix([]byte(prefix)))...)
		require.NoError(t, err)
		require.NoError(t, rt.Restore(ctx, "", nil, piecesSeq(nil)))
		for i := range 500 {
			_, err := rt.Apply(fmt.Sprintf("k%04d", i), int64(i), "seq", seqCursor(i), streaming.Float(1))
			require.NoError(t, err)
		}
		require.NoError(t, rt.Flush())
		return rt
	}
	gone, kept := run("s/a/"), run("s/ab/")
	require.NoError(t, gone.Close())
	require.Positive(t, count("s/a/"), "states written behind stay after Close")
	before := count("s/ab/")
	require.Positive(t, before)

	require.NoError(t, keyedstate.DeleteState(ctx, db, []byte("s/a/")))
	require.Zero(t, count("s/a/"))
	require.Equal(t, before, count("s/ab/"), "another runtime's keys stay")
	_, found, err := kept.Get("k0001")
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, kept.Close())

	for _, bad := range []string{"", "\xffkeyedstate-changed/"} {
		require.ErrorContains(t, keyedstate.DeleteState(ctx, db, []byte(bad)), "not a runtime's prefix")
	}
}

// TestExpiryScanChecksEveryStoredKey: ExpireIdle scans the stored keys a
// batch (1024) at a time. Bug: the key the scan stopped at, unchecked,
// was the one the next batch started after, so the key at every batch
// boundary was never checked and an idle key stayed (and was counted)
// forever.
func TestExpiryScanChecksEveryStoredKey(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	opts, clock := hourTTL()
	rt := newRuntime(t, g, openDB(t), opts...)
	state := smaState(t, g)
	const n = 3000 // past two batch boundaries
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	require.NoError(t, rt.Restore(ctx, "seq", seqCursor(1), keyedstate.PiecesSeq(4<<10, n, key, state)))
	require.Equal(t, n, rt.Stats().Keys)

	clock.Advance(2 * time.Hour)
	expired, err := rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, n, expired)
	require.Zero(t, rt.Stats().Keys)
	for i := range n {
		_, found, err := rt.Get(string(key(i)))
		require.NoError(t, err)
		require.False(t, found, "key %s", key(i))
	}
}

// TestDeleteStateDeletesSpilledRuns: a runtime whose changed keys
// outgrew their part of the budget (checkpoints failing) spilled them to
// Badger under the spilled runs' prefix and its own. Bug: DeleteState
// deleted only the keys under the runtime's prefix, and the spilled runs
// of a shard given up stayed in the database.
func TestDeleteStateDeletesSpilledRuns(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	count := func(prefix string) int { return countKeys(t, db, prefix) }
	rt, err := keyedstate.New[string](smaGraph(t), keyedstate.StringKeys{}, db, append(small(4), keyedstate.WithPrefix([]byte("s/a/")))...)
	require.NoError(t, err)
	require.NoError(t, rt.Restore(ctx, "", nil, piecesSeq(nil)))
	for i := 0; rt.Stats().Spills == 0; i++ {
		_, err := rt.Apply(fmt.Sprintf("k%04d", i)+strings.Repeat("x", 100), int64(i), "seq", seqCursor(i), streaming.Float(1))
		require.NoError(t, err)
	}
	require.NoError(t, rt.Close())
	require.Positive(t, count("\xffkeyedstate-changed/s/a/"), "spilled runs stay after Close")

	require.NoError(t, keyedstate.DeleteState(ctx, db, []byte("s/a/")))
	require.Zero(t, count("s/a/"))
	require.Zero(t, count("\xffkeyedstate-changed/s/a/"), "spilled runs")
}

// TestKeyTTLOfAFractionOfASecondIsNotShortened: a TTL that is not a
// whole number of seconds (1.5s, which WithKeyTTL accepts) was truncated
// to whole seconds. Bug: a key unseen for 1.1s expired; now it is
// kept until it is certainly unseen for the TTL (when keys were last
// seen is kept in whole seconds).
func TestKeyTTLOfAFractionOfASecondIsNotShortened(t *testing.T) {
	ctx := context.Background()
	clock := vclock.New(time.Unix(1_700_000_000, 900_000_000)) // x.9s
	rt := newRuntime(t, smaGraph(t), openDB(t), append(small(4), keyedstate.WithKeyTTL(1500*time.Millisecond), keyedstate.WithClock(clock.Now))...)
	_, err := rt.Apply("k", 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)

	clock.Advance(1100 * time.Millisecond) // unseen for 1.1s
	n, err := rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "unseen for 1.1s of a 1.5s TTL")
	require.Equal(t, 1, rt.Stats().Keys)

	clock.Advance(time.Second) // 2.1s
	n, err = rt.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, rt.Stats().Keys)
}

// countKeys counts db's keys under prefix.
func countKeys(t *testing.T, db *badger.DB, prefix string) int {
	t.Helper()
	n := 0
	require.NoError(t, db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues, opts.Prefix = false, []byte(prefix)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	return n
}
