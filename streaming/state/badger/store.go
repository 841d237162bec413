package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"

	"github.com/tflo-io/tflo/streaming"
)

// Store is a StateStore and CursorStore in a Badger database.
type Store struct {
	db      *badger.DB
	ownsDB  bool
	sync    bool
	limit   int64 // largest value, in memory (WithValueLimit)
	snapPfx []byte
	curPfx  []byte
	epPfx   []byte
	closed  atomic.Bool
}

var (
	_ streaming.StateStore     = (*Store)(nil)
	_ streaming.ShardKeyLister = (*Store)(nil)
)

var (
	_ streaming.StateStore       = (*Store)(nil)
	_ streaming.CursorStore      = (*Store)(nil)
	_ streaming.EpochClaimer     = (*Store)(nil)
	_ streaming.ConditionalSaver = (*Store)(nil)
)

// fenceMu serializes the read-compare-writes of every Store (SaveCursor,
// ClaimEpoch, SaveIfUnchanged): a database opened without conflict detection (the
// pipeline's, keyedstate.BadgerOptions) would let two of them read the
// same record and both write. They are a few a checkpoint, and a Badger
// database is held by one process, so a lock in it is enough.
var fenceMu sync.Mutex

// inMemoryValueLimit is Badger's largest ValueThreshold, the most an
// in-memory database accepts in one value.
const inMemoryValueLimit = 1 << 20

// batchCheckEvery is how many batch items pass between ctx checks.
const batchCheckEvery = 1024

// Open returns a store on the database given by WithDB or opened WithPath.
func Open(opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		db:      cfg.db,
		sync:    cfg.sync,
		limit:   inMemoryValueLimit,
		snapPfx: append(append([]byte(nil), cfg.prefix...), 's', '/'),
		curPfx:  append(append([]byte(nil), cfg.prefix...), 'c', '/'),
		epPfx:   append(append([]byte(nil), cfg.prefix...), 'e', '/'),
	}
	if cfg.limit > 0 {
		s.limit = min(s.limit, cfg.limit)
	}
	if s.db == nil {
		bo := badger.DefaultOptions(cfg.path).WithLogger(nil)
		if cfg.badger != nil {
			bo = cfg.badger(bo)
		}
		s.limit = min(s.limit, bo.ValueThreshold)
		db, err := badger.Open(bo)
		if err != nil {
			return nil, fmt.Errorf("badger state store: open %q: %w", cfg.path, err)
		}
		s.db, s.ownsDB = db, true
	}
	return s, nil
}

// DB returns the underlying database, for sharing it with the keyed hot
// state.
func (s *Store) DB() *badger.DB { return s.db }

// Close closes the database if the store opened it (WithPath); a shared
// database (WithDB) is left open. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.ownsDB {
		return s.db.Close()
	}
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

func (s *Store) snapKey(key []byte) []byte {
	return append(append(make([]byte, 0, len(s.snapPfx)+len(key)), s.snapPfx...), key...)
}

func (s *Store) curKey(key []byte) []byte {
	return append(append(make([]byte, 0, len(s.curPfx)+len(key)), s.curPfx...), key...)
}

func (s *Store) maybeSync() error {
	if !s.sync || s.db.Opts().InMemory {
		return nil
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("badger state store: sync: %w", err)
	}
	return nil
}

// checkSize refuses a value Badger would refuse, before Badger builds an
// error message that dumps the whole value.
func (s *Store) checkSize(key, v []byte) error {
	o := s.db.Opts()
	// In memory, Badger refuses values above the ValueThreshold it was
	// opened with, at most 1 MiB (Opts reports MaxInt32 after Open: the
	// store has it from WithValueLimit, or its own Open).
	if o.InMemory && int64(len(v)) > s.limit {
		return fmt.Errorf("snapshot key %q: encoded snapshot of %d bytes exceeds the %d-byte value limit of an in-memory Badger database", key, len(v), s.limit)
	}
	if int64(len(v)) >= o.ValueLogFileSize {
		return fmt.Errorf("snapshot key %q: encoded snapshot of %d bytes does not fit a %d-byte Badger value log file", key, len(v), o.ValueLogFileSize)
	}
	return nil
}

// Save stores snap under key, replacing any previous snapshot.
func (s *Store) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	v := streaming.MarshalSnapshot(snap)
	if err := s.checkSize(key, v); err != nil {
		return err
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(s.snapKey(key), v)
	})
	if err != nil {
		return fmt.Errorf("snapshot key %q: save: %w", key, err)
	}
	return s.maybeSync()
}

// SaveBatch stores every item with one badger.WriteBatch (see the package
// doc for what is and is not atomic). A key repeated in the batch ends with
// its last item.
func (s *Store) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(items) == 0 {
		return nil
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for i, it := range items {
		if i%batchCheckEvery == 0 && i > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		v := streaming.MarshalSnapshot(it.Snapshot)
		if err := s.checkSize(it.Key, v); err != nil {
			return fmt.Errorf("save batch: %w", err)
		}
		if err := wb.Set(s.snapKey(it.Key), v); err != nil {
			return fmt.Errorf("save batch: snapshot key %q: %w", it.Key, err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("save batch of %d snapshots: %w", len(items), err)
	}
	return s.maybeSync()
}

// Load returns key's snapshot, or an error wrapping streaming.ErrNotFound.
// A value that fails its checksum is refused with an error naming the key
// and wrapping streaming.ErrCorrupt.
func (s *Store) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := s.check(ctx); err != nil {
		return streaming.Snapshot{}, err
	}
	var snap streaming.Snapshot
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(s.snapKey(key))
		if err != nil {
			return err
		}
		// UnmarshalSnapshot copies what it keeps, so decoding inside
		// Value (without ValueCopy) is safe.
		return item.Value(func(v []byte) error {
			var derr error
			snap, derr = streaming.UnmarshalSnapshot(v)
			return derr
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return streaming.Snapshot{}, fmt.Errorf("snapshot key %q: %w", key, streaming.ErrNotFound)
	}
	if err != nil {
		return streaming.Snapshot{}, fmt.Errorf("snapshot key %q: %w", key, err)
	}
	return snap, nil
}

// ListKeys returns every stored snapshot key, in key order.
func (s *Store) ListKeys(ctx context.Context) ([][]byte, error) {
	return s.listKeys(ctx, nil, nil)
}

// ListShardKeys implements streaming.ShardKeyLister: the keys
// streaming.CheckpointKeyShard gives shard, in key order, found by a
// seek to the shard's name instead of a walk over every shard's keys.
func (s *Store) ListShardKeys(ctx context.Context, shard string) ([][]byte, error) {
	return s.listKeys(ctx, []byte(shard+"/"), func(k []byte) bool {
		sh, ok := streaming.CheckpointKeyShard(k)
		return ok && sh == shard
	})
}

// listKeys returns the snapshot keys starting with prefix that keep
// (nil: all) keeps, in key order.
func (s *Store) listKeys(ctx context.Context, prefix []byte, keep func(key []byte) bool) ([][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		opt := badger.DefaultIteratorOptions
		opt.PrefetchValues = false
		opt.Prefix = append(slices.Clip(s.snapPfx), prefix...)
		it := txn.NewIterator(opt)
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n%batchCheckEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			k := it.Item().Key()[len(s.snapPfx):]
			if keep == nil || keep(k) {
				keys = append(keys, append([]byte{}, k...))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshot keys: %w", err)
	}
	return keys, nil
}

// Delete removes key; deleting an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key []byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(s.snapKey(key)) }); err != nil {
		return fmt.Errorf("snapshot key %q: delete: %w", key, err)
	}
	return s.maybeSync()
}

// SaveCursor stores rec under key unless the stored record has a newer
// epoch (an error wrapping streaming.ErrFenced). The read and the write are
// one transaction, retried when a concurrent writer conflicts.
func (s *Store) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	v := streaming.MarshalCursorRecord(rec)
	err := s.rewrite(ctx, s.curKey(key), func(old []byte, found bool) ([]byte, error) {
		if found {
			stored, err := streaming.UnmarshalCursorRecord(old)
			if err != nil {
				return nil, fmt.Errorf("stored record: %w", err)
			}
			if err := streaming.CheckCursorFence(key, stored, rec); err != nil {
				return nil, err
			}
		}
		return v, nil
	})
	switch {
	case errors.Is(err, streaming.ErrFenced), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case err != nil:
		return fmt.Errorf("cursor key %q: save: %w", key, err)
	}
	return s.maybeSync()
}

// rewrite sets k to what next makes of its stored value (found false:
// none), read and written in one transaction (fenced).
func (s *Store) rewrite(ctx context.Context, k []byte, next func(old []byte, found bool) ([]byte, error)) error {
	return s.fenced(ctx, func(txn *badger.Txn) error {
		old, found, err := get(txn, k)
		if err != nil {
			return err
		}
		v, err := next(old, found)
		if err != nil {
			return err
		}
		return txn.Set(k, v)
	})
}

// fenced runs a read-compare-write as one transaction, under fenceMu and
// retried when a concurrent writer conflicts.
func (s *Store) fenced(ctx context.Context, update func(txn *badger.Txn) error) error {
	fenceMu.Lock()
	defer fenceMu.Unlock()
	for {
		err := s.db.Update(update)
		if !errors.Is(err, badger.ErrConflict) {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
}

// get returns k's value in txn, found false when it has none.
func get(txn *badger.Txn, k []byte) (v []byte, found bool, err error) {
	item, err := txn.Get(k)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if v, err = item.ValueCopy(nil); err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// SaveIfUnchanged implements streaming.ConditionalSaver: the items are
// compared with what is stored and the unchanged ones written in one
// transaction, under the lock every read-compare-write of a Store in the
// process takes (SaveCursor, ClaimEpoch; a Badger database is held by one
// process), and with Badger's conflict detection where the database has
// it. So two Stores on one database (two runtimes of one process) cannot
// both replace what they read.
func (s *Store) SaveIfUnchanged(ctx context.Context, items []streaming.ConditionalSave) ([]error, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	vals := make([][]byte, len(items))
	for i, it := range items {
		vals[i] = streaming.MarshalSnapshot(it.Snapshot)
		if err := s.checkSize(it.Key, vals[i]); err != nil {
			return nil, fmt.Errorf("save if unchanged: %w", err)
		}
	}
	var refused []error
	err := s.fenced(ctx, func(txn *badger.Txn) error {
		refused = make([]error, len(items))
		for i, it := range items {
			k := s.snapKey(it.Key)
			old, found, err := get(txn, k)
			if err != nil {
				return fmt.Errorf("snapshot key %q: %w", it.Key, err)
			}
			var stored *streaming.Snapshot
			if found {
				snap, err := streaming.UnmarshalSnapshot(old)
				if err != nil {
					return fmt.Errorf("snapshot key %q: stored snapshot: %w", it.Key, err)
				}
				stored = &snap
			}
			if !it.Unchanged(stored) {
				refused[i] = fmt.Errorf("snapshot key %q: save refused, it changed since it was read: %w", it.Key, streaming.ErrConflict)
				continue
			}
			if err := txn.Set(k, vals[i]); err != nil {
				return fmt.Errorf("snapshot key %q: %w", it.Key, err)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("save %d snapshots if unchanged: %w", len(items), err)
	}
	if err := s.maybeSync(); err != nil {
		return nil, err
	}
	return refused, nil
}

// LoadCursor returns key's cursor record, or an error wrapping
// streaming.ErrNotFound.
func (s *Store) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	if err := s.check(ctx); err != nil {
		return streaming.CursorRecord{}, err
	}
	var rec streaming.CursorRecord
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(s.curKey(key))
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) (derr error) {
			rec, derr = streaming.UnmarshalCursorRecord(b)
			return derr
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return streaming.CursorRecord{}, fmt.Errorf("cursor key %q: %w", key, streaming.ErrNotFound)
	}
	if err != nil {
		return streaming.CursorRecord{}, fmt.Errorf("cursor key %q: %w", key, err)
	}
	return rec, nil
}

// DeleteKeys removes every key with one badger.WriteBatch; absent keys are
// not an error. (The optional batch-delete capability.)
func (s *Store) DeleteKeys(ctx context.Context, keys [][]byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for i, k := range keys {
		if i%batchCheckEvery == 0 && i > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := wb.Delete(s.snapKey(k)); err != nil {
			return fmt.Errorf("delete batch: snapshot key %q: %w", k, err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("delete batch of %d snapshots: %w", len(keys), err)
	}
	return s.maybeSync()
}

// ClaimEpoch claims under name the lowest epoch, at least atLeast, past
// every epoch claimed under name in this store before (kept in the
// database under the store's prefix): a Badger database is held by one
// process, so its claims are that process's runs.
func (s *Store) ClaimEpoch(ctx context.Context, name string, atLeast streaming.Epoch) (streaming.Epoch, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	k := append(append(make([]byte, 0, len(s.epPfx)+len(name)), s.epPfx...), name...)
	next := atLeast
	err := s.rewrite(ctx, k, func(old []byte, found bool) ([]byte, error) {
		if found {
			last, err := strconv.ParseUint(string(old), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("the last claim %q is not an epoch: %w", old, streaming.ErrCorrupt)
			}
			if last == math.MaxUint64 { // one past it would wrap to an older epoch
				return nil, fmt.Errorf("the last claim is the largest epoch, %d; no epoch is past it", last)
			}
			next = max(atLeast, streaming.Epoch(last)+1)
		}
		return strconv.AppendUint(nil, uint64(next), 10), nil
	})
	if err != nil {
		return 0, fmt.Errorf("badger state store: claim an epoch of %q: %w", name, err)
	}
	if err := s.maybeSync(); err != nil {
		return 0, err
	}
	return next, nil
}
