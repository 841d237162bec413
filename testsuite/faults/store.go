package faults

import (
	"context"
	"fmt"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

// Op names a store operation a fault can target.
type Op string

// The operations of a Store.
const (
	OpSave            Op = "Save"
	OpSaveBatch       Op = "SaveBatch"
	OpSaveIfUnchanged Op = "SaveIfUnchanged"
	OpLoad            Op = "Load"
	OpListKeys        Op = "ListKeys"
	OpDelete          Op = "Delete"
	OpDeleteKeys      Op = "DeleteKeys"
	OpRefreshKey      Op = "RefreshKey"
	OpSaveCursor      Op = "SaveCursor"
	OpLoadCursor      Op = "LoadCursor"
)

func (o Op) isWrite() bool {
	switch o {
	case OpSave, OpSaveBatch, OpSaveIfUnchanged, OpDelete, OpDeleteKeys, OpSaveCursor:
		return true
	}
	return false
}

// Store forwards to a StateStore and a CursorStore and injects faults.
// It has the optional capabilities the checkpointer uses, DeleteKeys,
// RefreshKey and ListShardKeys, forwarded to the inner store (see their
// docs), and it is a streaming.ConditionalSaver when (and only when) the
// inner state store is one, so a store under test keeps its own behaviour
// through the wrapper: a Checkpointer commits its manifests through
// SaveIfUnchanged (OpSaveIfUnchanged) on a conditional store, with Save
// or SaveBatch on another.
//
// Rules, checked in this order on every call:
//   - crash: once the crash point is reached, every write fails with
//     ErrCrashed and changes nothing (reads still work, so a test can
//     inspect what "survived");
//   - hang: a hung operation blocks until its ctx is done and returns
//     ctx.Err(), never touching the inner store;
//   - fail: the next n calls of an operation fail with an error wrapping
//     ErrInjected.
type Store interface {
	streaming.StateStore
	streaming.CursorStore
	streaming.ShardKeyLister

	// DeleteKeys deletes keys in one call, the checkpointer's batch
	// delete: through the inner store's DeleteKeys where it has one (the
	// files, Badger, memory and S3 stores do), else one Delete each. It
	// is one write towards CrashAfter.
	DeleteKeys(ctx context.Context, keys [][]byte) error
	// RefreshKey has the inner store reread key on its next Load, where
	// it caches what it read (the S3 store caches each shard's manifest,
	// and a restore refreshes it: without this a worker regaining a
	// shard through the wrapper read its own older checkpoint); other
	// stores read afresh anyway.
	RefreshKey(ctx context.Context, key []byte) error

	// FailNext makes the next n calls of op fail with ErrInjected.
	FailNext(op Op, n int)
	// Hang makes every call of the ops block until its ctx is done.
	Hang(ops ...Op)
	// CrashAfter sets the crash point: after n more successful writes
	// (Save, SaveBatch, SaveIfUnchanged, Delete, DeleteKeys, SaveCursor
	// each count one), every write fails with ErrCrashed. When partial is
	// non-nil, the SaveBatch that hits the crash point first applies the
	// first partial(len(items)) items (a batch that is not atomic);
	// otherwise it applies nothing.
	CrashAfter(n int, partial func(items int) int)
	// Heal clears every rule, including a crash.
	Heal()
	// Crashed reports whether the crash point was reached.
	Crashed() bool
	// Writes returns the number of writes that reached the inner stores.
	Writes() int
	// Calls returns how many times op was called (faulted or not).
	Calls(op Op) int
}

// store is a Store over an inner state store that is not a
// streaming.ConditionalSaver.
type store struct {
	state   streaming.StateStore
	cursors streaming.CursorStore

	mu         sync.Mutex
	writes     int // successful writes so far
	inflight   int // writes let through to the inner stores, not yet returned
	crashAt    int // -1: no crash point; else writes allowed before the crash
	crashed    bool
	partialCut func(n int) int
	hang       map[Op]bool
	fail       map[Op]int
	calls      map[Op]int
}

// conditionalStore is a Store over a streaming.ConditionalSaver.
type conditionalStore struct {
	*store
	cs streaming.ConditionalSaver
}

var (
	_ Store                      = (*store)(nil)
	_ Store                      = (*conditionalStore)(nil)
	_ streaming.ConditionalSaver = (*conditionalStore)(nil)
)

// Wrap returns a Store with no faults over state and cursors (either may
// be nil when a test uses only the other; calling a nil one panics). It
// is a streaming.ConditionalSaver when state is one.
func Wrap(state streaming.StateStore, cursors streaming.CursorStore) Store {
	s := &store{state: state, cursors: cursors, crashAt: -1, hang: map[Op]bool{}, fail: map[Op]int{}, calls: map[Op]int{}}
	if cs, ok := state.(streaming.ConditionalSaver); ok {
		return &conditionalStore{store: s, cs: cs}
	}
	return s
}

func (s *store) FailNext(op Op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[op] = n
}

func (s *store) Hang(ops ...Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range ops {
		s.hang[o] = true
	}
}

func (s *store) CrashAfter(n int, partial func(items int) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashAt = s.writes + n
	s.crashed = false
	s.partialCut = partial
}

func (s *store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashAt, s.crashed, s.partialCut = -1, false, nil
	clear(s.hang)
	clear(s.fail)
}

func (s *store) Crashed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

func (s *store) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func (s *store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// decision is what a call should do.
type decision struct {
	hang    bool
	err     error
	partial int // for a crashing SaveBatch: items to apply; -1 for none
}

func (s *store) decide(op Op, key []byte, items int) decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	// Writes on their way to the inner stores count towards the crash
	// point: concurrent writes must not all pass the check before any of
	// them is counted, landing more than the n writes CrashAfter allows.
	if op.isWrite() && s.crashAt >= 0 && s.writes+s.inflight >= s.crashAt {
		d := decision{err: fmt.Errorf("%s %q: %w", op, key, ErrCrashed), partial: -1}
		if !s.crashed && op == OpSaveBatch && s.partialCut != nil {
			d.partial = min(max(s.partialCut(items), 0), items)
		}
		s.crashed = true
		return d
	}
	if s.hang[op] {
		return decision{hang: true}
	}
	if n := s.fail[op]; n > 0 {
		s.fail[op] = n - 1
		return decision{err: fmt.Errorf("%s %q: %w", op, key, ErrInjected)}
	}
	if op.isWrite() {
		s.inflight++ // released by wrote
	}
	return decision{}
}

// wrote ends a write decide let through, counting it when it succeeded.
func (s *store) wrote(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if err == nil {
		s.writes++
	}
	return err
}

func (s *store) gate(ctx context.Context, d decision) error {
	if d.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return d.err
}

// Save implements streaming.StateStore.
func (s *store) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	if err := s.gate(ctx, s.decide(OpSave, key, 1)); err != nil {
		return err
	}
	return s.wrote(s.state.Save(ctx, key, snap))
}

// Load implements streaming.StateStore.
func (s *store) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := s.gate(ctx, s.decide(OpLoad, key, 0)); err != nil {
		return streaming.Snapshot{}, err
	}
	return s.state.Load(ctx, key)
}

// ListKeys implements streaming.StateStore.
func (s *store) ListKeys(ctx context.Context) ([][]byte, error) {
	if err := s.gate(ctx, s.decide(OpListKeys, nil, 0)); err != nil {
		return nil, err
	}
	return s.state.ListKeys(ctx)
}

// ListShardKeys implements streaming.ShardKeyLister: through the inner
// store's ListShardKeys where it has one (the Badger and S3 stores do),
// else its ListKeys. Faults count and gate it as a ListKeys (OpListKeys).
func (s *store) ListShardKeys(ctx context.Context, shard string) ([][]byte, error) {
	if err := s.gate(ctx, s.decide(OpListKeys, nil, 0)); err != nil {
		return nil, err
	}
	if l, ok := s.state.(streaming.ShardKeyLister); ok {
		return l.ListShardKeys(ctx, shard)
	}
	return s.state.ListKeys(ctx)
}

// SaveBatch implements streaming.StateStore.
func (s *store) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	var first []byte
	if len(items) > 0 {
		first = items[0].Key
	}
	d := s.decide(OpSaveBatch, first, len(items))
	if d.partial > 0 {
		// The crash lands in the middle of a non-atomic batch.
		_ = s.state.SaveBatch(ctx, items[:d.partial])
	}
	if err := s.gate(ctx, d); err != nil {
		return err
	}
	return s.wrote(s.state.SaveBatch(ctx, items))
}

// SaveIfUnchanged implements streaming.ConditionalSaver through the
// inner store's. It is one write towards CrashAfter, whatever it refuses;
// a crash or fault applies none of the items.
func (s *conditionalStore) SaveIfUnchanged(ctx context.Context, items []streaming.ConditionalSave) ([]error, error) {
	var first []byte
	if len(items) > 0 {
		first = items[0].Key
	}
	if err := s.gate(ctx, s.decide(OpSaveIfUnchanged, first, len(items))); err != nil {
		return nil, err
	}
	refused, err := s.cs.SaveIfUnchanged(ctx, items)
	return refused, s.wrote(err)
}

// Delete implements streaming.StateStore.
func (s *store) Delete(ctx context.Context, key []byte) error {
	if err := s.gate(ctx, s.decide(OpDelete, key, 1)); err != nil {
		return err
	}
	return s.wrote(s.state.Delete(ctx, key))
}

// DeleteKeys implements Store.
func (s *store) DeleteKeys(ctx context.Context, keys [][]byte) error {
	var first []byte
	if len(keys) > 0 {
		first = keys[0]
	}
	if err := s.gate(ctx, s.decide(OpDeleteKeys, first, len(keys))); err != nil {
		return err
	}
	if d, ok := s.state.(interface {
		DeleteKeys(context.Context, [][]byte) error
	}); ok {
		return s.wrote(d.DeleteKeys(ctx, keys))
	}
	for _, k := range keys {
		if err := s.state.Delete(ctx, k); err != nil {
			return s.wrote(err)
		}
	}
	return s.wrote(nil)
}

// RefreshKey implements Store.
func (s *store) RefreshKey(ctx context.Context, key []byte) error {
	if err := s.gate(ctx, s.decide(OpRefreshKey, key, 0)); err != nil {
		return err
	}
	if r, ok := s.state.(interface {
		RefreshKey(context.Context, []byte) error
	}); ok {
		return r.RefreshKey(ctx, key)
	}
	return nil
}

// SaveCursor implements streaming.CursorStore.
func (s *store) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if err := s.gate(ctx, s.decide(OpSaveCursor, key, 1)); err != nil {
		return err
	}
	return s.wrote(s.cursors.SaveCursor(ctx, key, rec))
}

// LoadCursor implements streaming.CursorStore.
func (s *store) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	if err := s.gate(ctx, s.decide(OpLoadCursor, key, 0)); err != nil {
		return streaming.CursorRecord{}, err
	}
	return s.cursors.LoadCursor(ctx, key)
}
