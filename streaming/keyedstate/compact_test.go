package keyedstate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// restoredKey is key i of a large restore.
func restoredKey(i int) []byte { return fmt.Appendf(nil, "restored/%07d", i) }

// A restore of many memtables leaves the state in one level, none in
// level 0: a lookup checks one table, not every level-0 table and every
// level.
func TestLargeRestoreLeavesOneLevel(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	db := openDB(t)
	rt := newRuntime(t, g, db, small(40)...)
	state := startState(t)
	// About 25 MiB: a dozen memtables of the test DB, past its level-0
	// trigger of five tables, so compactions move some of it down.
	const n = 150_000
	require.NoError(t, rt.Restore(ctx, "seq", nil, keyedstate.PiecesSeq(64<<10, n, restoredKey, state)))
	levels := map[int]int{}
	for _, l := range db.Levels() {
		if l.NumTables > 0 {
			levels[l.Level] = l.NumTables
		}
	}
	require.Len(t, levels, 1, "levels with tables (level: tables): %v", levels)
	require.Zero(t, levels[0], "level-0 tables: %v", levels)
	for _, i := range []int{0, n / 2, n - 1} {
		got, found, err := rt.Get(string(restoredKey(i)))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, state, got)
	}
	require.Equal(t, n, rt.Stats().Keys)
	require.Positive(t, rt.Stats().RestoreCompaction, "the restore compacted")
	// A restore of less than a memtable does not compact, and says so.
	require.NoError(t, rt.Restore(ctx, "seq", nil, keyedstate.PiecesSeq(64<<10, 100, restoredKey, state)))
	require.Zero(t, rt.Stats().RestoreCompaction)
	require.Equal(t, uint64(100), rt.Stats().RestoredItems)
}

// A runtime restoring (and compacting) a large state while another on
// the same DB flushes all the time: both finish, each with its state.
func TestRestoreCompactsWhileAnotherRuntimeWrites(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	db := openDB(t)
	a := newRuntime(t, g, db, append(small(40), keyedstate.WithPrefix([]byte("a/")))...)
	b := newRuntime(t, g, db, append(small(40), keyedstate.WithPrefix([]byte("b/")))...)
	recs := makeRecords(9, 30_000, 2000)
	done := make(chan error, 1)
	go func() {
		for i, r := range recs {
			if _, err := b.Apply(r.key, r.ts, "seq", seqCursor(i), streaming.Float(r.value)); err != nil {
				done <- err
				return
			}
		}
		done <- b.Flush()
	}()
	state := startState(t)
	const n = 60_000
	for range 2 {
		require.NoError(t, a.Restore(ctx, "seq", nil, keyedstate.PiecesSeq(64<<10, n, restoredKey, state)))
	}
	require.NoError(t, <-done)
	require.Positive(t, b.Stats().Flushes)
	requireSameState(t, reference(g, recs), b, keysOf(recs))
	require.Equal(t, n, a.Stats().Keys)
	got, found, err := a.Get(string(restoredKey(n - 1)))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, state, got)
}
