package badgerstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

func openPath(t *testing.T) *badgerstore.Store {
	t.Helper()
	s, err := badgerstore.Open(badgerstore.WithPath(t.TempDir()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func sharedDB(t *testing.T) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func TestConformancePath(t *testing.T) {
	statetest.Run(t, func(t *testing.T) streaming.StateStore { return openPath(t) })
	statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore { return openPath(t) })
	statetest.RunConditionalSaver(t, func(t *testing.T) (a, b streaming.StateStore) { return twoStores(t, sharedDB(t)) })
}

// twoStores opens two Stores on db, as two runtimes of a process open
// theirs on the worker's database.
func twoStores(t *testing.T, db *badger.DB) (a, b streaming.StateStore) {
	t.Helper()
	sa, err := badgerstore.Open(badgerstore.WithDB(db))
	require.NoError(t, err)
	sb, err := badgerstore.Open(badgerstore.WithDB(db))
	require.NoError(t, err)
	return sa, sb
}

// The shared-database case: the suite runs against a store whose database
// also holds another store's keys and unrelated keys, which it must never
// list, load or delete.
func TestConformanceSharedDB(t *testing.T) {
	newStore := func(t *testing.T) *badgerstore.Store {
		db := sharedDB(t)
		other, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithPrefix([]byte("other/")))
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, other.Save(ctx, []byte("a"), streaming.Snapshot{Data: []byte("other")}))
		require.NoError(t, other.SaveCursor(ctx, []byte("a"), streaming.CursorRecord{Epoch: 99}))
		require.NoError(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("hot/a"), []byte("x")) }))
		s, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithPrefix([]byte("mine/")))
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, s.Close())
			got, err := other.Load(ctx, []byte("a"))
			require.NoError(t, err, "the other store's snapshot survived")
			require.Equal(t, []byte("other"), got.Data)
			require.NoError(t, db.View(func(txn *badger.Txn) error { _, err := txn.Get([]byte("hot/a")); return err }))
		})
		return s
	}
	statetest.Run(t, func(t *testing.T) streaming.StateStore { return newStore(t) })
	statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore { return newStore(t) })
}

// The pipeline's state database, which is its durable store unless the
// spec names another, is opened with keyedstate.BadgerOptions: without
// Badger's conflict detection (a cursor's fence, read, compare epochs,
// write, and an epoch claim must hold all the same when writers race),
// with small memtables and value-log files.
func TestConformancePipelineDB(t *testing.T) {
	newStore := func(t *testing.T) *badgerstore.Store {
		opts := keyedstate.BadgerOptions(t.TempDir(), 64<<20).WithLogger(nil)
		require.False(t, opts.DetectConflicts)
		db, err := badger.Open(opts)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		s, err := badgerstore.Open(badgerstore.WithDB(db))
		require.NoError(t, err)
		return s
	}
	statetest.Run(t, func(t *testing.T) streaming.StateStore { return newStore(t) })
	statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore { return newStore(t) })
	statetest.RunConditionalSaver(t, func(t *testing.T) (a, b streaming.StateStore) { return twoStores(t, newStore(t).DB()) })
	// Every claimer a store of its own on one database, as the shards'
	// runs of a worker each open theirs.
	db := newStore(t).DB()
	statetest.RunEpochClaimer(t, func(t *testing.T) streaming.EpochClaimer {
		s, err := badgerstore.Open(badgerstore.WithDB(db))
		require.NoError(t, err)
		return s
	})
}

// Claims outlive the process's run: a database reopened goes on past them.
func TestEpochClaimsPersist(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	ctx := context.Background()
	s, err := badgerstore.Open(badgerstore.WithPath(dir), badgerstore.WithPrefix([]byte("p/")))
	require.NoError(t, err)
	ep, err := s.ClaimEpoch(ctx, "mqtt.gw-1", 4)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(4), ep)
	require.NoError(t, s.Close())
	_, err = s.ClaimEpoch(ctx, "mqtt.gw-1", 1)
	require.ErrorIs(t, err, badgerstore.ErrClosed)

	s, err = badgerstore.Open(badgerstore.WithPath(dir), badgerstore.WithPrefix([]byte("p/")))
	require.NoError(t, err)
	defer s.Close()
	ep, err = s.ClaimEpoch(ctx, "mqtt.gw-1", 1)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(5), ep, "past the claim before the reopen")
	keys, err := s.ListKeys(ctx)
	require.NoError(t, err)
	require.Empty(t, keys, "a claim is not a snapshot")
}

func TestSharedDBStaysOpenAfterClose(t *testing.T) {
	db := sharedDB(t)
	s, err := badgerstore.Open(badgerstore.WithDB(db))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	require.False(t, db.IsClosed())
	require.ErrorIs(t, s.Save(context.Background(), []byte("k"), streaming.Snapshot{}), badgerstore.ErrClosed)
}

func TestPersistsAcrossReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	ctx := context.Background()
	s, err := badgerstore.Open(badgerstore.WithPath(dir))
	require.NoError(t, err)
	require.NoError(t, s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: []byte("a/b"), Snapshot: streaming.Snapshot{Data: []byte("v")}}}))
	require.NoError(t, s.SaveCursor(ctx, []byte("p0"), streaming.CursorRecord{Type: "kafka", Epoch: 3, CheckpointID: 8}))
	require.NoError(t, s.Close())

	s, err = badgerstore.Open(badgerstore.WithPath(dir))
	require.NoError(t, err)
	defer s.Close()
	got, err := s.Load(ctx, []byte("a/b"))
	require.NoError(t, err)
	require.Equal(t, []byte("v"), got.Data)
	rec, err := s.LoadCursor(ctx, []byte("p0"))
	require.NoError(t, err)
	require.Equal(t, uint64(8), rec.CheckpointID)
	require.ErrorIs(t, s.SaveCursor(ctx, []byte("p0"), streaming.CursorRecord{Epoch: 2}), streaming.ErrFenced)
}

func TestCorruptValueNamesKey(t *testing.T) {
	db := sharedDB(t)
	s, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithPrefix([]byte("p/")))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Save(ctx, []byte("a/b"), streaming.Snapshot{Data: []byte("state")}))
	require.NoError(t, s.SaveCursor(ctx, []byte("a/b"), streaming.CursorRecord{Epoch: 1}))
	flip := func(k string) {
		require.NoError(t, db.Update(func(txn *badger.Txn) error {
			item, err := txn.Get([]byte(k))
			require.NoError(t, err)
			v, err := item.ValueCopy(nil)
			require.NoError(t, err)
			v[len(v)/2] ^= 0x40
			return txn.Set([]byte(k), v)
		}))
	}
	flip("p/s/a/b")
	_, err = s.Load(ctx, []byte("a/b"))
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.Contains(t, err.Error(), `snapshot key "a/b": snapshot: checksum mismatch`)

	flip("p/c/a/b")
	_, err = s.LoadCursor(ctx, []byte("a/b"))
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.Contains(t, err.Error(), `cursor key "a/b"`)
	err = s.SaveCursor(ctx, []byte("a/b"), streaming.CursorRecord{Epoch: 5})
	require.ErrorIs(t, err, streaming.ErrCorrupt, "a corrupt stored cursor is not silently overwritten")
}

func TestInMemoryDBRefusesLargeSnapshotClearly(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	require.NoError(t, err)
	defer db.Close()
	s, err := badgerstore.Open(badgerstore.WithDB(db))
	require.NoError(t, err)
	ctx := context.Background()
	big := streaming.Snapshot{Data: make([]byte, 2<<20)}
	err = s.Save(ctx, []byte("big/1"), big)
	require.ErrorContains(t, err, `snapshot key "big/1": encoded snapshot of 2097`)
	require.Less(t, len(err.Error()), 300, "the error does not dump the value")
	err = s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: []byte("small"), Snapshot: streaming.Snapshot{Data: []byte("x")}}, {Key: []byte("big/2"), Snapshot: big}})
	require.ErrorContains(t, err, `snapshot key "big/2"`)
	// Small snapshots work in memory.
	require.NoError(t, s.Save(ctx, []byte("small"), streaming.Snapshot{Data: []byte("x")}))
}

func TestOpenValidates(t *testing.T) {
	db := sharedDB(t)
	tests := []struct {
		name string
		opts []badgerstore.Option
		want string
	}{
		{"nothing", nil, "give either WithDB"},
		{"both", []badgerstore.Option{badgerstore.WithDB(db), badgerstore.WithPath(t.TempDir())}, "both given"},
		{"badger options on shared db", []badgerstore.Option{badgerstore.WithDB(db), badgerstore.WithBadgerOptions(func(o badger.Options) badger.Options { return o })}, "only applies"},
		{"negative value limit", []badgerstore.Option{badgerstore.WithDB(db), badgerstore.WithValueLimit(-1)}, "value limit -1 bytes must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := badgerstore.Open(tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// An in-memory database refuses a value above the threshold it was opened
// with, in an error that carries the whole value; told the threshold, the
// store refuses it first, in a line.
func TestInMemoryValueLimit(t *testing.T) {
	const limit = 64 << 10
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).WithValueThreshold(limit))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	s, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithValueLimit(limit))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Save(ctx, []byte("small"), streaming.Snapshot{Data: make([]byte, limit/2)}))
	err = s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: []byte("large"), Snapshot: streaming.Snapshot{Data: make([]byte, limit)}}})
	require.ErrorContains(t, err, `snapshot key "large": encoded snapshot of 65554 bytes exceeds the 65536-byte value limit of an in-memory Badger database`)
	require.Less(t, len(err.Error()), 300, "the error does not carry the value")
	_, err = s.Load(ctx, []byte("large"))
	require.ErrorIs(t, err, streaming.ErrNotFound)
}
