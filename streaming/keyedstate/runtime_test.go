package keyedstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
)

func TestRuntimeMatchesKeyed(t *testing.T) {
	g := smaGraph(t)
	recs := makeRecords(1, 20_000, 500)
	ref := streaming.NewKeyed[string](g)
	rt := newRuntime(t, g, openDB(t), small(40)...)
	require.Equal(t, 40, rt.Capacity())
	for i, r := range recs {
		in, err := rt.Apply(r.key, r.ts, "seq", seqCursor(i), streaming.Float(r.value))
		require.NoError(t, err)
		want := ref.Eval(r.key, r.ts, streaming.Float(r.value))
		require.Equal(t, want.Output(0), in.Output(0), "record %d key %s", i, r.key)
	}
	st := rt.Stats()
	require.LessOrEqual(t, st.Cached, 40)
	require.Positive(t, st.Evictions)
	require.Positive(t, st.Flushes)
	require.Positive(t, st.Misses)
	requireSameState(t, ref, rt, keysOf(recs))
	require.NoError(t, rt.Flush())
	requireSameState(t, ref, rt, keysOf(recs))
}

func TestRuntimeValidation(t *testing.T) {
	g := smaGraph(t)
	db := openDB(t)
	cases := []struct {
		name string
		opts []keyedstate.Option
		want string
	}{
		{"budget below two batches", []keyedstate.Option{keyedstate.WithMemoryBudget(testDBBytes + 2<<20), keyedstate.WithWriteBatchBytes(1 << 20), keyedstate.WithGCHeadroom(0)}, "two write batches of 1048576 bytes"},
		{"budget below Badger's memory", []keyedstate.Option{keyedstate.WithMemoryBudget(testDBBytes), keyedstate.WithEntryBytes(100), keyedstate.WithGCHeadroom(0)},
			fmt.Sprintf("after Badger's memtables and caches (%d bytes; open the DB with keyedstate.BadgerOptions", testDBBytes)},
		{"zero DB share", []keyedstate.Option{keyedstate.WithDBShare(0)}, "DB share 0"},
		{"GC headroom 1", []keyedstate.Option{keyedstate.WithGCHeadroom(1)}, "GC headroom 1 must be"},
		{"zero budget", []keyedstate.Option{keyedstate.WithMemoryBudget(0)}, "memory budget 0 bytes"},
		{"no room for a key", []keyedstate.Option{keyedstate.WithMemoryBudget(3 << 10), keyedstate.WithWriteBatchBytes(1 << 10), keyedstate.WithEntryBytes(5000)}, "hold no key of"},
		{"zero piece", []keyedstate.Option{keyedstate.WithPieceBytes(0)}, "piece size 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := keyedstate.New[string](g, keyedstate.StringKeys{}, db, tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestMeasuredEntryBytes(t *testing.T) {
	rt := newRuntime(t, smaGraph(t), openDB(t), keyedstate.WithMemoryBudget(64<<20))
	st := rt.Stats()
	require.Greater(t, st.EntryBytes, 100, "an instance with two SMAs costs more than 100 bytes")
	require.Less(t, st.EntryBytes, 10_000)
	budget := float64(64 << 20)
	live := int64(budget * (1 - 1.0/3))
	require.Positive(t, st.SketchBytes)
	require.Equal(t, int((live-testDBBytes-2*(1<<20)-st.SketchBytes)/int64(st.EntryBytes)), st.Capacity,
		"64 MiB less a third for the GC, Badger, two write batches of 1 MiB and the admission sketch")
	require.Equal(t, 64<<20-live, st.GCHeadroom)
	require.Equal(t, testDBBytes, st.BadgerBytes)
}

func checkpointer(t testing.TB, rt *keyedstate.Runtime[string], st durableStore, opts ...streaming.CheckpointerOption) *streaming.Checkpointer {
	t.Helper()
	cp, err := streaming.NewCheckpointer("shard-0", rt, st, st, append([]streaming.CheckpointerOption{streaming.WithOperators(rt.Graph().Operators())}, opts...)...)
	require.NoError(t, err)
	return cp
}

type durableStore interface {
	streaming.StateStore
	streaming.CursorStore
}

// backends are the durable stores a checkpoint is tested against.
func backends(t *testing.T) map[string]func() durableStore {
	return map[string]func() durableStore{
		"memory": func() durableStore { return memory.New() },
		"files": func() durableStore {
			s, err := files.Open(t.TempDir(), files.WithSync(false))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"badger": func() durableStore {
			s, err := badgerstore.Open(badgerstore.WithDB(openDB(t)), badgerstore.WithSync(false))
			require.NoError(t, err)
			return s
		},
	}
}

func TestCheckpointAndRestore(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	recs := makeRecords(2, 6000, 300)
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			st := open()
			rt := newRuntime(t, g, openDB(t), small(30)...)
			cp := checkpointer(t, rt, st, streaming.WithMaxRuns(3))

			var lastBytes []int64
			for i, r := range recs {
				_, err := rt.Apply(r.key, r.ts, "seq", seqCursor(i), streaming.Float(r.value))
				require.NoError(t, err)
				if (i+1)%1000 == 0 {
					res, err := cp.Checkpoint(ctx)
					require.NoError(t, err)
					require.Equal(t, i, seqOf(t, res.CursorType, res.Cursor))
					lastBytes = append(lastBytes, res.Bytes)
				}
			}
			require.Len(t, lastBytes, 6)
			require.LessOrEqual(t, cp.Status().Runs, 3)
			rec, err := st.LoadCursor(ctx, []byte("shard-0"))
			require.NoError(t, err)
			require.Equal(t, uint64(6), rec.CheckpointID)

			// Restore into a new runtime over an empty Badger.
			rt2 := newRuntime(t, g, openDB(t), small(30)...)
			info, err := checkpointer(t, rt2, st).Restore(ctx)
			require.NoError(t, err)
			require.Equal(t, len(recs)-1, seqOf(t, info.CursorType, info.Cursor))
			requireSameState(t, reference(g, recs), rt2, keysOf(recs))
			typ, cur := rt2.Cursor()
			require.Equal(t, len(recs)-1, seqOf(t, typ, cur))
		})
	}
}

func TestIncrementalCheckpointWritesOnlyChangedKeys(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	st := memory.New()
	rt := newRuntime(t, g, openDB(t), small(100)...)
	cp := checkpointer(t, rt, st)
	for i := range 1000 {
		_, err := rt.Apply(fmt.Sprintf("k%04d", i), 1, "seq", seqCursor(i), streaming.Float(1))
		require.NoError(t, err)
	}
	full, err := cp.Checkpoint(ctx)
	require.NoError(t, err)
	for i := range 10 {
		_, err := rt.Apply(fmt.Sprintf("k%04d", i*97), 2, "seq", seqCursor(1000+i), streaming.Float(2))
		require.NoError(t, err)
	}
	incr, err := cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Less(t, incr.Bytes*30, full.Bytes, "10 of 1000 keys changed: full %d bytes, incremental %d", full.Bytes, incr.Bytes)
	require.Zero(t, rt.Stats().DirtyKeys)
}

// The cut is the state between two records, whatever the hot path does
// after it: keys changed in the cache, keys evicted and reloaded, keys
// deleted, keys only in Badger; with 20,000 keys the lists of changed keys
// are also spilled to Badger on both sides of the cut.
func TestCutIsConsistent(t *testing.T) {
	for _, tc := range []struct{ cached, keys int }{{25, 400}, {25, 20_000}, {600, 20_000}} {
		t.Run(fmt.Sprint(tc.keys, "keys", tc.cached, "cached"), func(t *testing.T) { testCutIsConsistent(t, tc.cached, tc.keys) })
	}
}

// testCutIsConsistent: with a cache of 600 keys (an admission sketch),
// records of keys the full cache does not admit change states of the cut
// on the spare instance.
func testCutIsConsistent(t *testing.T, cached, keys int) {
	ctx := context.Background()
	g := smaGraph(t)
	recs := makeRecords(3, 8000, keys)
	before, after := recs[:5000], recs[5000:]
	rt := newRuntime(t, g, openDB(t), small(cached)...)
	for i, r := range before {
		_, err := rt.Apply(r.key, r.ts, "seq", seqCursor(i), streaming.Float(r.value))
		require.NoError(t, err)
	}
	cut, err := rt.Cut(ctx)
	require.NoError(t, err)
	_, err = rt.Cut(ctx)
	require.ErrorIs(t, err, keyedstate.ErrCutPending)

	// The hot path runs on: every key of the cut is touched or deleted.
	for i, r := range after {
		_, err := rt.Apply(r.key, r.ts, "seq", seqCursor(5000+i), streaming.Float(r.value))
		require.NoError(t, err)
	}
	deleted := keysOf(before)[:5]
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error {
		for _, k := range deleted {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Positive(t, rt.Stats().CapturedKeys)
	if keys > 1000 && cached < 100 {
		require.Positive(t, rt.Stats().Spills)
	}
	if cached >= 512 {
		require.Positive(t, rt.Stats().NotAdmitted)
	}

	var pieces [][]byte
	require.NoError(t, cut.Pieces(ctx, func(p []byte) error { pieces = append(pieces, append([]byte(nil), p...)); return nil }))
	require.Greater(t, len(pieces), 1)
	typ, cur := cut.Cursor()
	require.Equal(t, 4999, seqOf(t, typ, cur))

	// A retried save emits the same pieces.
	var again [][]byte
	require.NoError(t, cut.Pieces(ctx, func(p []byte) error { again = append(again, append([]byte(nil), p...)); return nil }))
	require.Equal(t, pieces, again)
	cut.Release(true)

	rt2 := newRuntime(t, g, openDB(t), small(cached)...)
	require.NoError(t, rt2.Restore(ctx, typ, cur, func(yield func([]byte, error) bool) {
		for _, p := range pieces {
			if !yield(p, nil) {
				return
			}
		}
	}))
	requireSameState(t, reference(g, before), rt2, keysOf(recs))

	// The deletions reach the next cut as tombstones.
	cut2, err := rt.Cut(ctx)
	require.NoError(t, err)
	var p2 [][]byte
	require.NoError(t, cut2.Pieces(ctx, func(p []byte) error { p2 = append(p2, append([]byte(nil), p...)); return nil }))
	cut2.Release(true)
	require.NoError(t, rt2.Restore(ctx, typ, cur, func(yield func([]byte, error) bool) {
		for _, p := range append(pieces, p2...) {
			if !yield(p, nil) {
				return
			}
		}
	}))
	ref := reference(g, recs)
	for _, k := range deleted {
		ref.Delete(k)
	}
	requireSameState(t, ref, rt2, keysOf(recs))
}

func TestUnsavedCutIsCarriedForward(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	rt := newRuntime(t, g, openDB(t), small(10)...)
	recs := makeRecords(4, 500, 50)
	for i, r := range recs {
		_, err := rt.Apply(r.key, r.ts, "seq", seqCursor(i), streaming.Float(r.value))
		require.NoError(t, err)
	}
	c1, err := rt.Cut(ctx)
	require.NoError(t, err)
	// Touch a key of the cut after the failed cut is released: the next
	// cut must still see it as changed and copy it on write.
	c1.Release(false)
	c2, err := rt.Cut(ctx)
	require.NoError(t, err)
	r := recs[0]
	_, err = rt.Apply(r.key, 1e9, "seq", seqCursor(999), streaming.Float(1000))
	require.NoError(t, err)
	var pieces [][]byte
	require.NoError(t, c2.Pieces(ctx, func(p []byte) error { pieces = append(pieces, append([]byte(nil), p...)); return nil }))
	c2.Release(true)
	rt2 := newRuntime(t, g, openDB(t))
	typ, cur := c2.Cursor()
	require.NoError(t, rt2.Restore(ctx, typ, cur, func(yield func([]byte, error) bool) {
		for _, p := range pieces {
			if !yield(p, nil) {
				return
			}
		}
	}))
	requireSameState(t, reference(g, recs), rt2, keysOf(recs))
}

func TestClosedRuntime(t *testing.T) {
	rt := newRuntime(t, smaGraph(t), openDB(t))
	require.NoError(t, rt.Close())
	require.NoError(t, rt.Close())
	_, err := rt.Apply("a", 1, "seq", nil, streaming.Float(1))
	require.True(t, errors.Is(err, keyedstate.ErrClosed))
}

// The hot path keeps applying records while saves hang past their
// deadline; a failed checkpoint holds no cut; nothing is lost once the
// store heals.
func TestHotPathRunsWhileCheckpointsFail(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	recs := makeRecords(5, 4000, 100)
	mem := memory.New()
	store := faults.Wrap(mem, mem)
	rt := newRuntime(t, g, openDB(t), small(20)...)
	cp, err := streaming.NewCheckpointer("shard-0", rt, store, store,
		streaming.WithStageTimeouts(time.Second, 50*time.Millisecond, time.Second))
	require.NoError(t, err)

	var next atomic.Int64
	apply := func(until int) {
		for i := int(next.Load()); i < until; i++ {
			r := recs[i]
			if _, err := rt.Apply(r.key, r.ts, "seq", seqCursor(i), streaming.Float(r.value)); err != nil {
				panic(err)
			}
			next.Store(int64(i + 1))
		}
	}
	apply(1000)
	store.Hang(faults.OpSaveBatch)
	done := make(chan struct{})
	go func() { defer close(done); apply(3000) }()
	for range 2 {
		_, err := cp.Checkpoint(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	<-done
	require.Equal(t, int64(3000), next.Load())
	require.Equal(t, 2, cp.Status().ConsecutiveFailures)
	apply(4000)
	require.False(t, rt.Stats().CutPending, "no cut is held after a failed checkpoint")

	store.Heal()
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	rt2 := newRuntime(t, g, openDB(t), small(20)...)
	_, err = checkpointer(t, rt2, mem).Restore(ctx)
	require.NoError(t, err)
	requireSameState(t, reference(g, recs), rt2, keysOf(recs))
}

// TestDeleteOfAnAbsentKeyHoldsNothing: Tx.Delete of a key with no state
// (never seen, or deleted already) recorded a deletion all the same: a
// changed key, an entry of the deleted keys and a tombstone written
// behind, held in memory until the next saved checkpoint (a stream of
// deletions of unknown keys took the cache's room). It changes nothing,
// and the deletion of a key that had state still reaches the cut.
func TestDeleteOfAnAbsentKeyHoldsNothing(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	rt := newRuntime(t, g, openDB(t), small(100)...)
	_, err := rt.Apply("kept", 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)
	_, err = rt.Apply("gone", 1, "seq", seqCursor(2), streaming.Float(1))
	require.NoError(t, err)
	c, err := rt.Cut(ctx)
	require.NoError(t, err)
	_, err = collectPieces(t, c)
	require.NoError(t, err)
	c.Release(true)
	before := rt.Stats()
	require.Zero(t, before.DirtyKeys)

	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error {
		for i := range 1000 {
			if err := tx.Delete(fmt.Sprintf("never/%04d", i)); err != nil {
				return err
			}
		}
		return nil
	}))
	st := rt.Stats()
	require.Zero(t, st.DirtyKeys, "no key changed")
	require.Equal(t, before.ChangedBytes, st.ChangedBytes)
	require.Equal(t, before.Capacity, st.Capacity)
	require.Zero(t, st.PendingBytes, "nothing to write behind")
	require.Equal(t, 2, st.Keys)

	// A key deleted twice: the second deletion changes nothing either,
	// and the first still reaches the cut.
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete("gone") }))
	require.Equal(t, 1, rt.Stats().DirtyKeys)
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete("gone") }))
	st = rt.Stats()
	require.Equal(t, 1, st.DirtyKeys)
	require.Equal(t, 1, st.Keys)
	c, err = rt.Cut(ctx)
	require.NoError(t, err)
	pieces, err := collectPieces(t, c)
	require.NoError(t, err)
	c.Release(true)
	rt2 := newRuntime(t, g, openDB(t))
	require.NoError(t, rt2.Restore(ctx, "seq", seqCursor(2), piecesSeq(pieces)))
	_, found, err := rt2.Get("gone")
	require.NoError(t, err)
	require.False(t, found)
}

// TestUnsavedCutCountsAKeyOnce: a key of a cut changed after it was
// listed as changed again, and when the cut was released unsaved (its
// checkpoint failed) its keys joined the list, that key a second time;
// a key of the released cut changed again was listed once more. Every
// failed checkpoint added a repeat of each hot key: Stats.DirtyKeys
// counted keys several times and the list grew. A key is listed once,
// and the next cut still saves every key's state.
func TestUnsavedCutCountsAKeyOnce(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	rt := newRuntime(t, g, openDB(t), small(100)...)
	l := recordLog{t: t, rt: rt}
	apply := l.apply
	for _, k := range []string{"a", "b", "c", "d"} {
		apply(k)
	}
	require.Equal(t, 4, rt.Stats().DirtyKeys)
	for range 20 { // checkpoints that fail, the hot path going on
		c, err := rt.Cut(ctx)
		require.NoError(t, err)
		apply("a") // changed during the save: copied on write
		require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete("d") }))
		c.Release(false)
		apply("b") // changed after the release
		apply("d")
		require.Equal(t, 4, rt.Stats().DirtyKeys, "keys a, b, c and d changed")
	}
	rt2 := l.saveAndRestore(g)
	// d was deleted before each of its records after the first: only
	// its last one counts.
	var kept []record
	for _, r := range l.recs {
		if r.key == "d" {
			kept = slices.DeleteFunc(kept, func(r record) bool { return r.key == "d" })
		}
		kept = append(kept, r)
	}
	requireSameState(t, reference(g, kept), rt2, []string{"a", "b", "c", "d"})
}

// TestUnsavedCutCountsASpilledKeyOnce: a key of a cut changed during its
// save is listed again, and the list spilled (a long key took it past
// its threshold) before the cut was released unsaved: the key was then
// both among the cut's keys and in the spilled run, and Stats.DirtyKeys
// counted it twice, once more per failed checkpoint. It is counted once,
// and the next cut saves every key's state once.
func TestUnsavedCutCountsASpilledKeyOnce(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	rt := newRuntime(t, g, openDB(t), small(4)...)
	l := recordLog{t: t, rt: rt}
	apply := l.apply
	keys := []string{"a", "b"}
	for _, k := range keys {
		apply(k)
	}
	for i := range 5 { // checkpoints that fail, the hot path going on
		c, err := rt.Cut(ctx)
		require.NoError(t, err)
		apply("a") // changed during the save: listed again
		spills := rt.Stats().Spills
		long := strings.Repeat(string(rune('p'+i)), 5000) // over small(4)'s spill threshold (4 kB)
		keys = append(keys, long)
		apply(long)
		require.Equal(t, spills+1, rt.Stats().Spills, "the long key spilled the list")
		c.Release(false)
		require.Equal(t, len(keys), rt.Stats().DirtyKeys, "keys a, b and %d long ones changed", i+1)
	}
	rt2 := l.saveAndRestore(g)
	requireSameState(t, reference(g, l.recs), rt2, keys)
}
