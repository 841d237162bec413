package keyedstate_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/streaming/ops"
)

// The keys changed since the last cut used to live in an uncounted map
// (about 45 MiB at 1M changed keys). Now they are a compact list counted
// in the budget, and when it outgrows its part (an eighth of what the
// budget leaves the cache) it is spilled to Badger as a sorted run: the
// cache keeps its room however many keys change between two saved cuts,
// and the cut still carries every one of them.
func TestChangedKeysStayWithinTheBudget(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	db := openDB(t)
	rt := newRuntime(t, g, db, keyedstate.WithEntryBytes(1000), keyedstate.WithWriteBatchBytes(4<<10), keyedstate.WithGCHeadroom(0),
		keyedstate.WithMemoryBudget(testDBBytes+8<<10+400_000))
	full := rt.Capacity()
	require.Equal(t, 400, full)
	const n = 20_000 // 13-byte keys: 280 kB in a list, over the 50 kB it may hold
	var recs []record
	for i := range n {
		recs = append(recs, record{key: fmt.Sprintf("sensor/%06d", i%(n/2)*2+i/(n/2)), ts: int64(i), value: float64(i % 7)})
	}
	apply := func(recs []record) {
		require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error {
			for _, r := range recs {
				if _, err := tx.Eval(r.key, r.ts, streaming.Float(r.value)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	apply(recs[:n/2])
	st := rt.Stats()
	require.Positive(t, st.Spills)
	require.Equal(t, n/2, st.DirtyKeys)
	require.Less(t, st.ChangedBytes, int64(100_000), "the list was spilled")
	require.GreaterOrEqual(t, st.Capacity, 300, "the cache keeps its room")
	require.LessOrEqual(t, st.CacheBytes+st.ChangedBytes+st.BadgerBytes+2*(4<<10), st.Budget)

	// An unsaved cut gives its keys, spilled runs included, to the next.
	c, err := rt.Cut(ctx)
	require.NoError(t, err)
	c.Release(false)
	apply(recs[n/2:])
	c, err = rt.Cut(ctx)
	require.NoError(t, err)
	var pieces [][]byte
	require.NoError(t, c.Pieces(ctx, func(p []byte) error { pieces = append(pieces, append([]byte(nil), p...)); return nil }))
	c.Release(true)
	st = rt.Stats()
	require.Zero(t, st.DirtyKeys)
	require.Zero(t, st.ChangedBytes)
	require.Equal(t, full, st.Capacity)
	require.Zero(t, countPrefix(t, db, []byte("\xffkeyedstate-changed/")), "a saved cut's runs are deleted")

	rt2 := newRuntime(t, g, openDB(t), small(50)...)
	require.NoError(t, rt2.Restore(ctx, "seq", seqCursor(1), piecesSeq(pieces)))
	require.Equal(t, uint64(n), rt2.Stats().RestoredItems, "every changed key, once")
	requireSameState(t, reference(g, recs), rt2, keysOf(recs))
}

func countPrefix(t *testing.T, db *badger.DB, prefix []byte) int {
	t.Helper()
	n := 0
	require.NoError(t, db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	return n
}

// Restoring a state ten times the memory budget works: Restore writes it
// to Badger and the keys load into the bounded cache as they are used.
func TestRestoreStateLargerThanTheBudget(t *testing.T) {
	ctx := context.Background()
	const budget = 6 << 20
	g, err := streaming.NewBuilder().Input("v").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(512) }, "v").Build()
	require.NoError(t, err)
	// One 512-value window state (4 KiB), shared by every key of the
	// checkpoint.
	src := g.NewInstance()
	for i := range 512 {
		src.Eval(int64(i), streaming.Float(float64(i)))
	}
	blob, err := src.Save()
	require.NoError(t, err)
	keys := 10*budget/len(blob) + 1
	key := func(i int) string { return fmt.Sprintf("sensor/%06d", i) }
	var ks, states [][]byte
	for i := range keys {
		ks, states = append(ks, []byte(key(i))), append(states, blob)
	}
	pieces, err := keyedstate.PiecesOf(1<<20, ks, states)
	require.NoError(t, err)
	state := keys * len(blob)
	require.GreaterOrEqual(t, state, 10*budget)

	// BadgerOptions with memtables and tables far smaller than its own
	// minimum, so that the budget can be small and the state still ten
	// times it in a quick test.
	db, err := badger.Open(keyedstate.BadgerOptions(t.TempDir(), budget).WithLogger(nil).
		WithMemTableSize(256 << 10).WithBaseTableSize(128 << 10))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rt := newRuntime(t, g, db, keyedstate.WithMemoryBudget(budget), keyedstate.WithWriteBatchBytes(64<<10), keyedstate.WithGCHeadroom(0))
	require.NoError(t, rt.Restore(ctx, "seq", seqCursor(1), piecesSeq(pieces)))
	st := rt.Stats()
	require.Equal(t, uint64(keys), st.RestoredItems)
	require.Zero(t, st.Cached, "Restore loads nothing into the cache")

	// Every key continues from the restored window: the next value 512
	// drops 0 and the mean moves from 255.5 to 256.5. A cut every 2,000
	// keys, as checkpoints would take, keeps the changed keys few.
	for i := range keys {
		in, err := rt.Apply(key(i), 512, "seq", seqCursor(2), streaming.Float(512))
		require.NoError(t, err)
		require.Equal(t, 256.5, in.Output(0).Float64(), "key %d", i)
		if i%2000 == 1999 {
			c, err := rt.Cut(ctx)
			require.NoError(t, err)
			require.NoError(t, c.Pieces(ctx, func([]byte) error { return nil }))
			c.Release(true)
		}
		if i%500 == 0 {
			st := rt.Stats()
			require.LessOrEqual(t, st.MemoryBytes(), st.Budget, "after key %d: %+v", i, st)
		}
	}
	st = rt.Stats()
	require.LessOrEqual(t, st.Cached, st.Capacity)
	require.Less(t, st.Capacity*10, keys, "the cache holds a small part of the keys")
	require.LessOrEqual(t, st.MemoryBytes(), st.Budget)
	// With the cache full, the parts add up to the budget: none is left
	// out of what the runtime (and the pipeline's memory gauge) reports.
	require.Equal(t, int64(2*64<<10), st.BatchBytes)
	require.Positive(t, st.SketchBytes)
	require.GreaterOrEqual(t, st.MemoryBytes(), st.Budget-2*int64(st.EntryBytes), "%+v", st)
	got, found, err := rt.Get(key(7))
	require.NoError(t, err)
	require.True(t, found)
	want := src
	want.Eval(512, streaming.Float(512))
	wb, err := want.Save()
	require.NoError(t, err)
	require.Equal(t, wb, got)
}

// A record an operator refuses (a NaN reading) is counted.
func TestRejectedRecordsCounted(t *testing.T) {
	rt := newRuntime(t, smaGraph(t), openDB(t))
	for _, v := range []float64{1, math.NaN(), 2, 1.7e308} {
		_, err := rt.Apply("a", 1, "seq", nil, streaming.Float(v))
		require.NoError(t, err)
	}
	require.Equal(t, uint64(2), rt.Stats().Rejected)
}

// BadgerOptions gives Badger about a quarter of the budget, and New
// counts it.
func TestBadgerOptionsFromTheBudget(t *testing.T) {
	const budget = 256 << 20
	opts := keyedstate.BadgerOptions(t.TempDir(), budget).WithLogger(nil)
	dbBytes := keyedstate.BadgerBytes(opts)
	require.LessOrEqual(t, dbBytes, int64(budget/4), "Badger takes %d of %d", dbBytes, budget)
	require.GreaterOrEqual(t, dbBytes, int64(budget/8), "Badger takes %d of %d", dbBytes, budget)
	db, err := badger.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rt := newRuntime(t, smaGraph(t), db, keyedstate.WithMemoryBudget(budget))
	st := rt.Stats()
	require.Equal(t, dbBytes, st.BadgerBytes)
	require.LessOrEqual(t, st.BadgerBytes+int64(st.Capacity*st.EntryBytes)+st.GCHeadroom+2*(4<<20), int64(budget))
	rt2 := newRuntime(t, smaGraph(t), db, keyedstate.WithMemoryBudget(budget/2), keyedstate.WithDBShare(2),
		keyedstate.WithPrefix([]byte("other/")))
	require.Equal(t, dbBytes/2, rt2.Stats().BadgerBytes, "two runtimes share the DB")
}

// Resize moves a running runtime to another budget and DB share (a
// worker re-splitting its budget as shards come and go): a smaller one
// evicts down to the new capacity at once, writing changed states behind,
// a larger one lets the cache grow again, and no key's state is lost
// either way. A budget that holds no key is refused and changes nothing.
func TestResizeShrinksAndGrowsTheCache(t *testing.T) {
	g := smaGraph(t)
	db := openDB(t)
	const budget = 32 << 20
	rt := newRuntime(t, g, db, keyedstate.WithMemoryBudget(budget), keyedstate.WithDBShare(2), keyedstate.WithWriteBatchBytes(64<<10))
	keys := 2 * rt.Capacity()
	key := func(i int) string { return fmt.Sprintf("k%06d", i) }
	var recs []record
	for round := range 2 {
		for i := range keys {
			recs = append(recs, record{key: key(i), ts: int64(round), value: float64(i + round)})
		}
	}
	apply := func(recs []record) {
		t.Helper()
		require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error {
			for _, r := range recs {
				if _, err := tx.Eval(r.key, r.ts, streaming.Float(r.value)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	apply(recs[:keys])
	st := rt.Stats()
	full := st.Capacity // below the first: the changed keys take their part
	require.Equal(t, full, st.Cached, "the cache fills up")

	// A quarter of the budget over twice the shares: the cache holds
	// fewer keys at once, before any record.
	require.NoError(t, rt.Resize(budget/4, 4))
	st = rt.Stats()
	require.Equal(t, int64(budget/4), st.Budget)
	require.Equal(t, testDBBytes/4, st.BadgerBytes)
	require.Less(t, st.Capacity, full/4)
	require.LessOrEqual(t, st.Cached, st.Capacity)
	require.Positive(t, st.Cached)

	// Twice the first budget: more room than at first.
	require.NoError(t, rt.Resize(2*budget, 2))
	require.Greater(t, rt.Capacity(), full)
	apply(recs[keys:])
	require.Greater(t, rt.Stats().Cached, st.Capacity, "the cache grows again as keys come")
	requireSameState(t, reference(g, recs), rt, keysOf(recs))

	// A budget too small for one key is refused, and changes nothing.
	before := rt.Stats()
	err := rt.Resize(64<<10, 1)
	require.ErrorIs(t, err, keyedstate.ErrBudgetTooSmall)
	after := rt.Stats()
	require.Equal(t, before.Budget, after.Budget)
	require.Equal(t, before.Capacity, after.Capacity)
	require.Error(t, rt.Resize(budget, 0), "a DB share below 1")
}

// A spilled run is written in chunks no larger than runChunkBytes (64
// KiB): an in-memory database sized from a small budget (here the test
// DB's 64 KiB value threshold) refuses a larger value, and a chunk that
// ended with the key taking it past 64 KiB was refused.
func TestSpilledRunChunksFitTheValueThreshold(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	rt := newRuntime(t, g, openDB(t), keyedstate.WithEntryBytes(1000), keyedstate.WithGCHeadroom(0),
		keyedstate.WithMemoryBudget(testDBBytes+8<<10+4_000_000))
	const n = 100_000 // 13-byte keys: 1.4 MB in a list, spilled in runs of several chunks
	var recs []record
	for i := range n {
		recs = append(recs, record{key: fmt.Sprintf("sensor/%06d", i), ts: int64(i), value: float64(i % 7)})
	}
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error {
		for _, r := range recs {
			if _, err := tx.Eval(r.key, r.ts, streaming.Float(r.value)); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Positive(t, rt.Stats().Spills)
	c, err := rt.Cut(ctx)
	require.NoError(t, err)
	var pieces [][]byte
	require.NoError(t, c.Pieces(ctx, func(p []byte) error { pieces = append(pieces, append([]byte(nil), p...)); return nil }))
	c.Release(true)
	rt2 := newRuntime(t, g, openDB(t), small(50)...)
	require.NoError(t, rt2.Restore(ctx, "seq", seqCursor(1), piecesSeq(pieces)))
	require.Equal(t, uint64(n), rt2.Stats().RestoredItems, "every changed key in the cut")
}
