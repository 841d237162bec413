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
// in the budget: the cache gives up room while they grow and gets it back
// when a saved cut takes them.
func TestChangedKeysCountInTheBudget(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	rt := newRuntime(t, g, openDB(t), keyedstate.WithEntryBytes(1000), keyedstate.WithWriteBatchBytes(4<<10),
		keyedstate.WithMemoryBudget(testDBBytes+8<<10+400_000))
	full := rt.Capacity()
	require.Equal(t, 400, full)
	const n = 10_000
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error {
		for i := range n {
			if _, err := tx.Eval(fmt.Sprintf("sensor/%06d", i), 1, streaming.Float(1)); err != nil {
				return err
			}
		}
		return nil
	}))
	st := rt.Stats()
	require.Equal(t, n, st.DirtyKeys)
	// 13-byte keys: 14 bytes each in the list, plus the slack of the
	// last chunk (chunks double).
	require.Less(t, st.ChangedBytes, int64(n*14*2), "changed keys cost %d bytes", st.ChangedBytes)
	require.Greater(t, st.ChangedBytes, int64(n*14))
	require.Equal(t, int((400_000-st.ChangedBytes)/1000), st.Capacity)
	require.Less(t, st.Capacity, full)
	require.LessOrEqual(t, st.Cached, st.Capacity)
	require.LessOrEqual(t, st.CacheBytes+st.ChangedBytes+st.BadgerBytes+2*(4<<10), st.Budget)

	c, err := rt.Cut(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Pieces(ctx, func([]byte) error { return nil }))
	require.Less(t, rt.Capacity(), full, "the pending cut's keys and sort index are counted")
	c.Release(true)
	st = rt.Stats()
	require.Zero(t, st.DirtyKeys)
	require.Zero(t, st.ChangedBytes)
	require.Equal(t, full, st.Capacity)
}

// Restoring a state ten times the memory budget works: Restore writes it
// to Badger and the keys load into the bounded cache as they are used.
func TestRestoreStateLargerThanTheBudget(t *testing.T) {
	ctx := context.Background()
	const budget = 4 << 20
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

	db, err := badger.Open(keyedstate.BadgerOptions(t.TempDir(), budget).WithLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rt := newRuntime(t, g, db, keyedstate.WithMemoryBudget(budget), keyedstate.WithWriteBatchBytes(64<<10))
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
			require.LessOrEqual(t, st.CacheBytes+st.ChangedBytes+st.BadgerBytes, st.Budget, "after key %d: %+v", i, st)
		}
	}
	st = rt.Stats()
	require.LessOrEqual(t, st.Cached, st.Capacity)
	require.Less(t, st.Capacity*10, keys, "the cache holds a small part of the keys")
	require.LessOrEqual(t, st.CacheBytes+st.ChangedBytes+st.BadgerBytes, st.Budget)
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

// BadgerOptions gives Badger a quarter of the budget, and New counts
// exactly that.
func TestBadgerOptionsFromTheBudget(t *testing.T) {
	const budget = 64 << 20
	opts := keyedstate.BadgerOptions(t.TempDir(), budget).WithLogger(nil)
	require.Equal(t, int64(budget/4), opts.MemTableSize*int64(opts.NumMemtables)+opts.BlockCacheSize+opts.IndexCacheSize)
	db, err := badger.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rt := newRuntime(t, smaGraph(t), db, keyedstate.WithMemoryBudget(budget))
	require.Equal(t, int64(budget/4), rt.Stats().BadgerBytes)
	rt2 := newRuntime(t, smaGraph(t), db, keyedstate.WithMemoryBudget(budget/2), keyedstate.WithDBShare(2),
		keyedstate.WithPrefix([]byte("other/")))
	require.Equal(t, int64(budget/8), rt2.Stats().BadgerBytes, "two runtimes share the DB")
}
