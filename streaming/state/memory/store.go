package memory

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

// Store keeps snapshots and cursor records in maps. The zero value is not
// usable; call New.
type Store struct {
	mu      sync.RWMutex
	snaps   map[string][]byte // key -> streaming.MarshalSnapshot
	cursors map[string]streaming.CursorRecord
	epochs  map[string]streaming.Epoch // name -> last epoch claimed
}

var (
	_ streaming.StateStore       = (*Store)(nil)
	_ streaming.CursorStore      = (*Store)(nil)
	_ streaming.EpochClaimer     = (*Store)(nil)
	_ streaming.ConditionalSaver = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{snaps: map[string][]byte{}, cursors: map[string]streaming.CursorRecord{}, epochs: map[string]streaming.Epoch{}}
}

// Save stores s under key, replacing any previous snapshot.
func (m *Store) Save(ctx context.Context, key []byte, s streaming.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := streaming.MarshalSnapshot(s)
	m.mu.Lock()
	m.snaps[string(key)] = b
	m.mu.Unlock()
	return nil
}

// SaveBatch stores every item under one lock acquisition: a reader sees
// either none or all of the batch. A cancelled ctx stores nothing.
func (m *Store) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	enc := make([][]byte, len(items))
	for i, it := range items {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		enc[i] = streaming.MarshalSnapshot(it.Snapshot)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	for i, it := range items {
		m.snaps[string(it.Key)] = enc[i]
	}
	m.mu.Unlock()
	return nil
}

// SaveIfUnchanged implements streaming.ConditionalSaver: every item is
// compared with what is stored and, unless refused, stored under one lock
// acquisition, so no other save comes between. A cancelled ctx stores
// nothing.
func (m *Store) SaveIfUnchanged(ctx context.Context, items []streaming.ConditionalSave) ([]error, error) {
	enc := make([][]byte, len(items))
	for i, it := range items {
		enc[i] = streaming.MarshalSnapshot(it.Snapshot)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	refused := make([]error, len(items))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, it := range items {
		var stored *streaming.Snapshot
		if b, ok := m.snaps[string(it.Key)]; ok {
			s, err := streaming.UnmarshalSnapshot(b)
			if err != nil {
				return nil, fmt.Errorf("snapshot key %q: %w", it.Key, err)
			}
			stored = &s
		}
		if !it.Unchanged(stored) {
			refused[i] = fmt.Errorf("snapshot key %q: save refused, it changed since it was read: %w", it.Key, streaming.ErrConflict)
			continue
		}
		m.snaps[string(it.Key)] = enc[i]
	}
	return refused, nil
}

// Load returns key's snapshot, or an error wrapping streaming.ErrNotFound.
func (m *Store) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return streaming.Snapshot{}, err
	}
	m.mu.RLock()
	b, ok := m.snaps[string(key)]
	m.mu.RUnlock()
	if !ok {
		return streaming.Snapshot{}, fmt.Errorf("snapshot key %q: %w", key, streaming.ErrNotFound)
	}
	s, err := streaming.UnmarshalSnapshot(b)
	if err != nil {
		return streaming.Snapshot{}, fmt.Errorf("snapshot key %q: %w", key, err)
	}
	return s, nil
}

// ListKeys returns every stored key, in no particular order.
func (m *Store) ListKeys(ctx context.Context) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	keys := make([][]byte, 0, len(m.snaps))
	for k := range m.snaps {
		keys = append(keys, []byte(k))
	}
	return keys, nil
}

// Delete removes key; deleting an absent key is not an error.
func (m *Store) Delete(ctx context.Context, key []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.snaps, string(key))
	m.mu.Unlock()
	return nil
}

// SaveCursor stores rec under key unless the stored record has a newer
// epoch, in which case it returns an error wrapping streaming.ErrFenced.
func (m *Store) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rec.Cursor = cloneOrNil(rec.Cursor)
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.cursors[string(key)]; ok {
		if err := streaming.CheckCursorFence(key, old, rec); err != nil {
			return err
		}
	}
	m.cursors[string(key)] = rec
	return nil
}

// LoadCursor returns key's cursor record, or an error wrapping
// streaming.ErrNotFound.
func (m *Store) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	if err := ctx.Err(); err != nil {
		return streaming.CursorRecord{}, err
	}
	m.mu.RLock()
	rec, ok := m.cursors[string(key)]
	m.mu.RUnlock()
	if !ok {
		return streaming.CursorRecord{}, fmt.Errorf("cursor key %q: %w", key, streaming.ErrNotFound)
	}
	rec.Cursor = cloneOrNil(rec.Cursor)
	return rec, nil
}

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// DeleteKeys removes every key under one lock acquisition; absent keys are
// not an error. (The optional batch-delete capability.)
func (m *Store) DeleteKeys(ctx context.Context, keys [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	for _, k := range keys {
		delete(m.snaps, string(k))
	}
	m.mu.Unlock()
	return nil
}

// ClaimEpoch claims under name the lowest epoch, at least atLeast, past
// every epoch claimed under name in this store before.
func (m *Store) ClaimEpoch(ctx context.Context, name string, atLeast streaming.Epoch) (streaming.Epoch, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next := atLeast
	if last, ok := m.epochs[name]; ok {
		if last == math.MaxUint64 { // one past it would wrap to an older epoch
			return 0, fmt.Errorf("memory state store: claim an epoch of %q: the last claim is the largest epoch, %d; no epoch is past it", name, uint64(last))
		}
		next = max(next, last+1)
	}
	m.epochs[name] = next
	return next, nil
}
