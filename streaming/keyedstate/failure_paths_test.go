package keyedstate_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// openFaultDB opens a test DB on which refuse makes Badger refuse every
// write (and read) of the keys whose first 8 bytes after the runtime's
// default prefix are ns (Badger's banned namespaces): a write error in
// the write-behind flush or a spill, for the failure paths.
func openFaultDB(t *testing.T) (db *badger.DB, refuse func(ns string)) {
	t.Helper()
	db, err := badger.Open(testDBOptions().WithNamespaceOffset(len("keyedstate/")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db, func(ns string) {
		require.Len(t, ns, 8)
		require.NoError(t, db.BanNamespace(binary.BigEndian.Uint64([]byte(ns))))
	}
}

// refusedKey is a key openFaultDB's refuse("refused/") refuses: longer
// than the namespace, as Badger checks only such keys.
const refusedKey = "refused/key"

func collectPieces(t *testing.T, c streaming.Cut) ([][]byte, error) {
	t.Helper()
	var pieces [][]byte
	err := c.Pieces(context.Background(), func(p []byte) error { pieces = append(pieces, slices.Clone(p)); return nil })
	return pieces, err
}

// TestPiecesAfterFailedFlushFails: a cut is pending; keys of the cut,
// untouched since, are evicted into the write-behind buffer; the flush of
// that buffer fails (here: a key Badger refuses; in production any write
// error). The failed batch is dropped from memory (finishFlush sets
// flushing = nil) and Pieces, which ignores the sticky error, reads the
// keys from Badger, where they never arrived: the cut saves tombstones
// for live keys, and a checkpoint built from it loses them.
func TestPiecesAfterFailedFlushFails(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	opts := bigEntries()
	db, refuse := openFaultDB(t)
	rt := newRuntime(t, g, db, opts...)
	apply := func(k string, i int) {
		_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(float64(i)))
		require.NoError(t, err)
	}
	apply(refusedKey, 0) // a key with state: its deletion is a write (Badger will refuse it)
	apply("a", 1)
	apply("b", 2)
	want, found, err := rt.Get("a")
	require.NoError(t, err)
	require.True(t, found)
	c1, err := rt.Cut(ctx)
	require.NoError(t, err)
	// A write Badger refuses sits in the write-behind buffer.
	require.NoError(t, rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete(refusedKey) }))
	refuse("refused/")
	// a and b (untouched since the cut) are evicted into the same buffer.
	for i := range 8 {
		apply(fmt.Sprintf("other%d", i), 10+i)
	}
	require.Error(t, rt.Flush(), "the flush fails")

	pieces, err := collectPieces(t, c1)
	if err != nil {
		return // refusing to save the cut is correct
	}
	c1.Release(true)
	typ, cur := c1.Cursor()
	rt2 := newRuntime(t, g, openDB(t), small(4)...)
	require.NoError(t, rt2.Restore(ctx, typ, cur, piecesSeq(pieces)))
	got, found, err := rt2.Get("a")
	require.NoError(t, err)
	require.True(t, found, "key a, live at the cut, is a tombstone in the cut saved after a failed flush")
	require.Equal(t, want, got)
}

// TestCutKeepsLastSeenOfTheCut: a key of the pending cut seen again
// after the cut is copied aside on write, but Eval stamps e.seen with the
// new record's time before markChanged captures it: the cut carries a
// last-seen time from after the cut.
func TestCutKeepsLastSeenOfTheCut(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	opts, clock := hourTTL()
	rt := newRuntime(t, g, openDB(t), opts...)
	_, err := rt.Apply("k", 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)
	c1, err := rt.Cut(ctx)
	require.NoError(t, err)
	clock.Advance(50 * time.Minute)
	_, err = rt.Apply("k", 2, "seq", seqCursor(2), streaming.Float(2))
	require.NoError(t, err)
	pieces, err := collectPieces(t, c1)
	require.NoError(t, err)
	c1.Release(true)
	typ, cur := c1.Cursor()

	rt2 := newRuntime(t, g, openDB(t), opts...)
	require.NoError(t, rt2.Restore(ctx, typ, cur, piecesSeq(pieces)))
	// At the cut, k was last seen at 0; 61 minutes later it is idle.
	clock.Advance(11 * time.Minute)
	n, err := rt2.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the cut carried k's last-seen time from after the cut")
}

// TestFailedDeleteKeepsTheKey: Tx.Delete of a cached key
// drops the entry (its changed state with it) before recording the
// change, and returns when spilling the changed-key list fails, before
// the deletion is written behind: the runtime stays usable, and the key
// reads back with the older state Badger holds — neither deleted nor as
// it was.
func TestFailedDeleteKeepsTheKey(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	db, refuse := openFaultDB(t)
	rt := newRuntime(t, g, db, small(4)...)
	apply := func(k string, i int, v float64) {
		_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(v))
		require.NoError(t, err)
	}
	// A long key: listing it as changed takes the list of changed keys
	// past the spill threshold.
	k := strings.Repeat("k", 8<<10)
	apply(k, 1, 1)
	for i := range 8 { // k goes to Badger with its first state
		apply(fmt.Sprintf("other%d", i), 10+i, 1)
	}
	require.NoError(t, rt.Flush())
	apply(k, 2, 100) // k cached, changed
	want, found, err := rt.Get(k)
	require.NoError(t, err)
	require.True(t, found)
	c, err := rt.Cut(ctx)
	require.NoError(t, err)
	c.Release(true)

	// The spill of the changed keys fails (any write error; here Badger
	// refuses the keys of spilled runs, "\xffkeyedstate-changed/...",
	// whose bytes 11 to 18 are "-changed").
	refuse("-changed")
	err = rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete(k) })
	require.ErrorContains(t, err, "spill changed keys")

	got, found, err := rt.Get(k)
	require.NoError(t, err)
	if found {
		require.Equal(t, want, got, "a failed Delete of k left its older stored state in place of its current one")
	}
}

// TestFailedSpillLeavesNoChunks: a spill of the list of changed keys that
// failed part way (here Badger refuses a chunk over its value threshold
// after the write batch committed the chunks before it; in production
// any write error) left those chunks in Badger under a run id nothing
// refers to, until a Restore or DeleteState. They are deleted.
func TestFailedSpillLeavesNoChunks(t *testing.T) {
	g := smaGraph(t)
	// An in-memory DB refuses a value over its value threshold: a chunk
	// of one 40 kB key passes, a full one (64 kB of 8 kB keys) does not.
	db, err := badger.Open(testDBOptions().WithValueThreshold(48 << 10))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rt := newRuntime(t, g, db, small(10_000)...) // no spill yet
	apply := func(k string, i int) error {
		_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(1))
		return err
	}
	// Sorted, the ten 40 kB keys come first: ten chunks, more than a
	// Badger write batch holds, so it commits some before the 8 kB keys'.
	for i := range 10 {
		require.NoError(t, apply(fmt.Sprintf("a%d", i)+strings.Repeat("a", 40<<10), i))
		require.NoError(t, apply(fmt.Sprintf("z%d", i)+strings.Repeat("z", 8<<10), 10+i))
	}
	require.Zero(t, rt.Stats().Spills)

	// The next change spills the list (it outgrew an eighth of what a
	// budget a tenth as large leaves for it), and the spill fails.
	require.NoError(t, rt.Resize(smallBudget(1000), 1))
	require.ErrorContains(t, apply("new", 20), "spill changed keys")
	require.Zero(t, countPrefix(t, db, []byte("\xffkeyedstate-changed/")), "chunks of the failed spill stay in Badger")
}

// TestFailedRestoreBlocksTheState: a restore that fails part way (here the
// checkpoint's pieces fail to download after the first) has already
// dropped the old state; the runtime kept the old cursor and served the
// half-restored state, so the next cut saved it, with that cursor, as a
// checkpoint: the keys of the pieces not restored were lost for good. The
// runtime now refuses everything but another restore.
func TestFailedRestoreBlocksTheState(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	src := newRuntime(t, g, openDB(t))
	for i := range 40 {
		_, err := src.Apply(fmt.Sprintf("k%02d", i), int64(i), "seq", seqCursor(i), streaming.Float(float64(i)))
		require.NoError(t, err)
	}
	c, err := src.Cut(ctx)
	require.NoError(t, err)
	pieces, err := collectPieces(t, c)
	require.NoError(t, err)
	c.Release(true)
	typ, cur := c.Cursor()

	rt := newRuntime(t, g, openDB(t))
	_, err = rt.Apply("old", 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)
	broken := func(yield func([]byte, error) bool) {
		if yield(pieces[0], nil) {
			yield(nil, fmt.Errorf("download piece 2: connection reset"))
		}
	}
	err = rt.Restore(ctx, typ, cur, broken)
	require.ErrorContains(t, err, "connection reset")

	_, _, err = rt.Get("k00")
	require.ErrorContains(t, err, "restore again", "reads of the half-restored state")
	_, err = rt.Apply("k01", 100, "seq", seqCursor(100), streaming.Float(1))
	require.ErrorContains(t, err, "restore again", "writes")
	_, err = rt.Cut(ctx)
	require.ErrorContains(t, err, "restore again", "a checkpoint of the half-restored state")

	require.NoError(t, rt.Restore(ctx, typ, cur, piecesSeq(pieces)), "a second restore")
	for i := range 40 {
		_, found, err := rt.Get(fmt.Sprintf("k%02d", i))
		require.NoError(t, err)
		require.True(t, found, "k%02d", i)
	}
}

// TestRecordAfterFailedFlushInTheSameProcessFails: a write-behind flush
// fails (a key Badger refuses) while one Process call goes on applying
// records; the failed batch, which held the states of keys evicted
// before it, is dropped. Bug: the rest of the call looked those keys up
// in Badger, found nothing, and applied their records to fresh states
// with no error (the sticky error only stopped the next call): a key's
// sum restarted from zero and its output went to the sinks. Now a lookup
// after the failed flush fails, naming the key.
func TestRecordAfterFailedFlushInTheSameProcessFails(t *testing.T) {
	g := smaGraph(t)
	opts := bigEntries()
	db, refuse := openFaultDB(t)
	rt := newRuntime(t, g, db, opts...)
	_, err := rt.Apply("a", 1, "seq", seqCursor(1), streaming.Float(100))
	require.NoError(t, err)
	// A key with state: its deletion is a write (a deletion of a key
	// with none writes nothing).
	_, err = rt.Apply(refusedKey, 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)
	var aErr error
	err = rt.Process(func(tx *keyedstate.Tx[string]) error {
		// A write Badger refuses heads the write-behind buffer; a is
		// evicted into it, and the new keys after it fill batches until
		// the hot path has waited for the failed flush.
		if err := tx.Delete(refusedKey); err != nil {
			return err
		}
		refuse("refused/")
		for i := range 300 {
			if _, err := tx.Eval(fmt.Sprintf("other%03d", i), int64(10+i), streaming.Float(1)); err != nil {
				break // the failed flush noticed (with the fix)
			}
		}
		_, aErr = tx.Eval("a", 2, streaming.Float(100))
		return nil
	})
	require.NoError(t, err, "fn returned nil")
	require.Error(t, aErr, "a's record was applied after the flush holding a's state failed")
	require.ErrorContains(t, aErr, `"a"`, "the error names the key")
	require.ErrorContains(t, aErr, "write-behind flush")
}

// TestNewKeyFailingToChangeIsNotHeld: the record of a new key fails
// because the list of changed keys cannot be spilled (a write error).
// Bug: the key stayed cached with an empty state and counted in
// Stats.Keys (and the key cap), though no record made it: Get found it,
// a cut would save it, and the count stayed one too high after it left
// the cache. Now the failed key is neither held nor counted.
func TestNewKeyFailingToChangeIsNotHeld(t *testing.T) {
	g := smaGraph(t)
	db, refuse := openFaultDB(t)
	rt := newRuntime(t, g, db, small(4)...)
	_, err := rt.Apply("k", 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)
	// Spills fail (Badger refuses the keys of spilled runs), and a long
	// new key takes the list of changed keys past the spill threshold.
	refuse("-changed")
	long := strings.Repeat("x", 8<<10)
	_, err = rt.Apply(long, 2, "seq", seqCursor(2), streaming.Float(2))
	require.ErrorContains(t, err, "spill changed keys")
	_, found, err := rt.Get(long)
	require.NoError(t, err)
	require.False(t, found, "a key no record made is held")
	require.Equal(t, 1, rt.Stats().Keys, "keys held")
}

// TestExpiredCountedWhenTheSweepFails: ExpireIdle deletes some idle keys
// and then fails (here a spill of the changed keys cannot be written).
// Bug: it returned how many it had deleted but did not count them in
// Stats.Expired, which counted a sweep's keys only when all went.
func TestExpiredCountedWhenTheSweepFails(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	opts, clock := hourTTL()
	db, refuse := openFaultDB(t)
	rt := newRuntime(t, g, db, opts...)
	// Four keys of 1000 bytes: deleting the fourth takes the list
	// of changed keys past the spill threshold.
	for i := range 4 {
		k := fmt.Sprintf("k%d", i) + strings.Repeat("x", 1000)
		_, err := rt.Apply(k, int64(i), "seq", seqCursor(i), streaming.Float(1))
		require.NoError(t, err)
	}
	c, err := rt.Cut(ctx) // the list of changed keys starts empty
	require.NoError(t, err)
	_, err = collectPieces(t, c)
	require.NoError(t, err)
	c.Release(true)

	refuse("-changed") // spills fail
	clock.Advance(2 * time.Hour)
	n, err := rt.ExpireIdle(ctx)
	require.ErrorContains(t, err, "spill changed keys")
	require.Positive(t, n, "keys deleted before the failure")
	require.Equal(t, uint64(n), rt.Stats().Expired)
	require.Equal(t, 4-n, rt.Stats().Keys)
}

// unsavable keeps the last value; its Save fails once that value is 13.
type unsavable struct{ last float64 }

func (o *unsavable) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	o.last = in[0].Float64()
	return streaming.Float(o.last)
}
func (o *unsavable) Reset()              { o.last = 0 }
func (o *unsavable) Name() string        { return "unsavable" }
func (o *unsavable) TypeVersion() uint32 { return 1 }
func (o *unsavable) Load([]byte) error   { return nil }
func (o *unsavable) Save() ([]byte, error) {
	if o.last == 13 {
		return nil, errors.New("13 does not save")
	}
	return []byte{byte(o.last)}, nil
}

// TestSaveErrorNamesTheKey: a cached key's state that fails to save at
// a checkpoint (or in Get) failed with the operator's error alone. Bug:
// it did not say which key, so the key could not be found (or deleted).
// Now the error names it, as the copy-on-write's and eviction's do.
func TestSaveErrorNamesTheKey(t *testing.T) {
	g, err := streaming.NewBuilder().Input("value").
		Node("last", func() streaming.Operator { return &unsavable{} }, "value").Build()
	require.NoError(t, err)
	rt := newRuntime(t, g, openDB(t), small(16)...)
	for i, v := range []float64{1, 13, 2} {
		_, err := rt.Apply(fmt.Sprintf("key-%d", i), int64(i), "seq", seqCursor(i), streaming.Float(v))
		require.NoError(t, err)
	}
	c, err := rt.Cut(context.Background())
	require.NoError(t, err)
	_, err = collectPieces(t, c)
	require.ErrorContains(t, err, "13 does not save")
	require.ErrorContains(t, err, `key "key-1"`)
	c.Release(false)
	_, _, err = rt.Get("key-1")
	require.ErrorContains(t, err, "13 does not save")
	require.ErrorContains(t, err, `key "key-1"`)
}

// TestValueLogGCErrorIsNotAFlushError: the flusher collects the value
// log's garbage after every half value-log file it wrote. A GC that fails
// (here made to) came back as the flush's error, though the batch was
// written: the runtime took it for a failed flush and refused every call
// after it. The GC's failure is counted in Stats, and the runtime carries
// on.
func TestValueLogGCErrorIsNotAFlushError(t *testing.T) {
	gcErr := errors.New("disk says no")
	var gcs atomic.Int64
	keyedstate.SetValueLogGC(t, func(*badger.DB, float64) error { gcs.Add(1); return gcErr })
	db, err := badger.Open(keyedstate.BadgerOptions(t.TempDir(), 64<<20).WithLogger(nil).WithValueLogFileSize(1 << 20))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	rt := newRuntime(t, smaGraph(t), db, keyedstate.WithMemoryBudget(64<<20), keyedstate.WithPrefix([]byte("gc/")))
	// Flush after every record until the flusher has written half a
	// value-log file and run a GC.
	for i := 0; gcs.Load() == 0; i++ {
		require.Less(t, i, 100_000, "no value-log GC ran")
		_, err := rt.Apply(fmt.Sprintf("key%06d", i), int64(i), "seq", seqCursor(i), streaming.Float(float64(i)))
		require.NoError(t, err)
		if i%100 == 99 {
			require.NoError(t, rt.Flush(), "the flush before the failed GC was written")
		}
	}
	require.NoError(t, rt.Flush())
	_, err = rt.Apply("after", 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err, "the runtime carries on after a failed value-log GC")
	st := rt.Stats()
	require.Positive(t, st.ValueLogGCErrors)
	require.ErrorIs(t, st.ValueLogGCError, gcErr)
	require.ErrorContains(t, st.ValueLogGCError, `prefix "gc/"`)
	require.ErrorContains(t, st.ValueLogGCError, "value log GC")
	_, found, err := rt.Get("key000000")
	require.NoError(t, err)
	require.True(t, found)
}

// TestFailedDeleteOfAKeyOfTheCutKeepsItOnce: a Tx.Delete of a key of a
// pending cut saves the key's state aside, then fails to spill the list
// of changed keys (a write error) and leaves the key as it was. Each
// retry saved the state aside again and counted it again: the cut's
// memory (Stats.ChangedBytes) grew by a state per failed deletion and
// the cache shrank for it until the cut was released. And each retry
// (of the deletion, or of a record of a new key) listed the key again:
// Stats.DirtyKeys and the list grew by a key per failed change. The
// state as of the cut is kept, and counted, once; a failed change lists
// nothing; the cut still saves the state.
func TestFailedDeleteOfAKeyOfTheCutKeepsItOnce(t *testing.T) {
	ctx := context.Background()
	g := smaGraph(t)
	db, refuse := openFaultDB(t)
	rt := newRuntime(t, g, db, small(100)...)
	// A long key, under small(100)'s spill threshold (12.5 kB) but over
	// small(4)'s (4 kB).
	long := strings.Repeat("x", 8<<10)
	_, err := rt.Apply(long, 1, "seq", seqCursor(1), streaming.Float(1))
	require.NoError(t, err)
	want, found, err := rt.Get(long)
	require.NoError(t, err)
	require.True(t, found)
	c, err := rt.Cut(ctx)
	require.NoError(t, err)

	// Listing a long key spills the list now, and spills fail.
	require.NoError(t, rt.Resize(smallBudget(4), 1))
	refuse("-changed")
	del := func() error {
		return rt.Process(func(tx *keyedstate.Tx[string]) error { return tx.Delete(long) })
	}
	require.ErrorContains(t, del(), "spill changed keys")
	st := rt.Stats()
	require.Equal(t, 1, st.CapturedKeys)
	require.Zero(t, st.DirtyKeys, "the failed deletion listed its key")
	for range 20 {
		require.ErrorContains(t, del(), "spill changed keys")
	}
	newKey := strings.Repeat("y", 8<<10)
	for i := range 20 {
		_, err := rt.Apply(newKey, int64(2+i), "seq", seqCursor(2+i), streaming.Float(2))
		require.ErrorContains(t, err, "spill changed keys")
	}
	after := rt.Stats()
	require.Equal(t, 1, after.CapturedKeys)
	require.Zero(t, after.DirtyKeys, "failed changes listed their keys")
	require.Equal(t, st.ChangedBytes, after.ChangedBytes, "failed changes kept states aside or listed keys")

	pieces, err := collectPieces(t, c)
	require.NoError(t, err)
	rt2 := newRuntime(t, g, openDB(t))
	require.NoError(t, rt2.Restore(ctx, "seq", seqCursor(1), piecesSeq(pieces)))
	got, found, err := rt2.Get(long)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, want, got)
}
