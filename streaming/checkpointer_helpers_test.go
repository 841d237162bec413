package streaming_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tflo-io/tflo/streaming"
)

// tinyStore is a minimal in-memory StateStore and CursorStore for these
// tests (the real one lives in streaming/state/memory, which imports this
// package).
type tinyStore struct {
	mu      sync.Mutex
	state   map[string]streaming.Snapshot
	cursors map[string]streaming.CursorRecord
}

func newTinyStore() *tinyStore {
	return &tinyStore{state: map[string]streaming.Snapshot{}, cursors: map[string]streaming.CursorRecord{}}
}

func (s *tinyStore) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap.Data = slices.Clone(snap.Data)
	snap.Meta.Cursor = slices.Clone(snap.Meta.Cursor)
	s.state[string(key)] = snap
	return nil
}

func (s *tinyStore) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return streaming.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, ok := s.state[string(key)]
	if !ok {
		return streaming.Snapshot{}, fmt.Errorf("key %q: %w", key, streaming.ErrNotFound)
	}
	return snap, nil
}

func (s *tinyStore) ListKeys(ctx context.Context) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for k := range s.state {
		out = append(out, []byte(k))
	}
	return out, nil
}

func (s *tinyStore) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	for _, it := range items {
		if err := s.Save(ctx, it.Key, it.Snapshot); err != nil {
			return err
		}
	}
	return nil
}

func (s *tinyStore) Delete(ctx context.Context, key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.state, string(key))
	return nil
}

func (s *tinyStore) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.cursors[string(key)]; ok && rec.Epoch < old.Epoch {
		return fmt.Errorf("cursor %q: epoch %d below %d: %w", key, rec.Epoch, old.Epoch, streaming.ErrFenced)
	}
	s.cursors[string(key)] = rec
	return nil
}

func (s *tinyStore) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.cursors[string(key)]
	if !ok {
		return rec, fmt.Errorf("cursor %q: %w", key, streaming.ErrNotFound)
	}
	return rec, nil
}

func (s *tinyStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.state))
}

// counterSource is a CheckpointSource holding one counter per key, with a
// sequence-number cursor. Apply is its hot path.
type counterSource struct {
	mu     sync.Mutex
	vals   map[string]int64
	dirty  map[string]bool
	seq    uint64
	cut    *counterCut
	cuts   int
	merges int
}

func newCounterSource() *counterSource {
	return &counterSource{vals: map[string]int64{}, dirty: map[string]bool{}}
}

func (s *counterSource) Apply(key string, delta int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals[key] += delta
	s.dirty[key] = true
	s.seq++
}

func (s *counterSource) snapshot() (map[string]int64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.vals), s.seq
}

type counterCut struct {
	src  *counterSource
	vals map[string]int64
	seq  uint64
}

func (s *counterSource) Cut(ctx context.Context) (streaming.Cut, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut != nil {
		return nil, fmt.Errorf("counter source: a cut is already pending")
	}
	c := &counterCut{src: s, vals: map[string]int64{}, seq: s.seq}
	for k := range s.dirty {
		c.vals[k] = s.vals[k]
	}
	clear(s.dirty)
	s.cut = c
	s.cuts++
	return c, nil
}

func (c *counterCut) Cursor() (string, []byte) {
	return "seq", binary.BigEndian.AppendUint64(nil, c.seq)
}

func encodeCounters(vals map[string]int64) []byte {
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendVarint(b, vals[k])
	}
	return b
}

func decodeCounters(b []byte, into map[string]int64) error {
	for len(b) > 0 {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return fmt.Errorf("counter piece: bad key length: %w", streaming.ErrCorrupt)
		}
		k := string(b[w : w+int(n)])
		b = b[w+int(n):]
		v, w := binary.Varint(b)
		if w <= 0 {
			return fmt.Errorf("counter piece: bad value: %w", streaming.ErrCorrupt)
		}
		b = b[w:]
		into[k] = v
	}
	return nil
}

// Pieces emits one piece per 4 keys so batching is exercised.
func (c *counterCut) Pieces(ctx context.Context, emit func([]byte) error) error {
	keys := slices.Sorted(maps.Keys(c.vals))
	for i := 0; i < len(keys); i += 4 {
		part := map[string]int64{}
		for _, k := range keys[i:min(i+4, len(keys))] {
			part[k] = c.vals[k]
		}
		if err := emit(encodeCounters(part)); err != nil {
			return err
		}
	}
	return nil
}

func (c *counterCut) Release(saved bool) {
	s := c.src
	s.mu.Lock()
	defer s.mu.Unlock()
	if !saved {
		for k := range c.vals {
			s.dirty[k] = true
		}
	}
	if s.cut == c {
		s.cut = nil
	}
}

func (s *counterSource) Restore(ctx context.Context, typ string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	vals := map[string]int64{}
	for p, err := range pieces {
		if err != nil {
			return err
		}
		if err := decodeCounters(p, vals); err != nil {
			return err
		}
	}
	if typ != "seq" || len(cursor) != 8 {
		return fmt.Errorf("counter source: cursor %s:%x is not a sequence number", typ, cursor)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals, s.seq = vals, binary.BigEndian.Uint64(cursor)
	clear(s.dirty)
	s.cut = nil
	return nil
}

func (s *counterSource) MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	s.mu.Lock()
	s.merges++
	s.mu.Unlock()
	vals := map[string]int64{}
	for _, r := range runs {
		for p, err := range r {
			if err != nil {
				return err
			}
			if err := decodeCounters(p, vals); err != nil {
				return err
			}
		}
	}
	return emit(encodeCounters(vals))
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
