package fakeactivities

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// Store is what MemoryShards keeps checkpoints in: a StateStore that is
// also the CursorStore (streaming/state/memory, files, badger).
type Store interface {
	streaming.StateStore
	streaming.CursorStore
}

// MemoryShards is the in-memory worker side of checkpoint rounds, for
// tests and benchmarks — not for production: N fake shards with real
// streaming.Checkpointers over one Store, split among workers, each worker
// an activities.Shards (the CheckpointHost the Rounds activity runs).
// Touch changes every key of every shard, so each checkpoint writes Keys
// keys per shard. Owner epochs can be moved per shard (Move) to play
// rebalances.
//
// Safe for concurrent use.
type MemoryShards struct {
	Pipeline string
	// Shards are the shard names in order ("<pipeline>/<i>").
	Shards []streaming.ShardID
	// Hosts maps a worker id to its host.
	Hosts map[string]*activities.Shards
	// Checkpointers in the order of Shards, for in-process baselines.
	Checkpointers []*streaming.Checkpointer

	sources []*keySource
	epochs  []atomic.Uint64
	owner   []string // worker id of each shard
	mu      sync.Mutex
}

// NewMemoryShards spreads n shards of keys keys each (values of valueBytes
// bytes) over workers, round robin, all owned at epoch 1, checkpointing
// into store.
func NewMemoryShards(pipeline string, n, keys, valueBytes int, store Store, workers ...string) (*MemoryShards, error) {
	if n < 1 || len(workers) == 0 {
		return nil, fmt.Errorf("memory shards: need at least one shard and one worker, got %d and %d", n, len(workers))
	}
	m := &MemoryShards{Pipeline: pipeline, Hosts: map[string]*activities.Shards{}, epochs: make([]atomic.Uint64, n)}
	for _, w := range workers {
		m.Hosts[w] = activities.NewShards()
	}
	for i := range n {
		name := streaming.ShardID(fmt.Sprintf("%s/%d", pipeline, i))
		src := newKeySource(keys, valueBytes)
		m.epochs[i].Store(1)
		epoch := &m.epochs[i]
		cp, err := streaming.NewCheckpointer(string(name), src, store, store,
			streaming.WithCursorFormatter(activities.FormatCursor),
			streaming.WithOwnership(streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return streaming.Epoch(epoch.Load()), true })))
		if err != nil {
			return nil, err
		}
		w := workers[i%len(workers)]
		m.Hosts[w].Register(pipeline, name, cp)
		m.Shards = append(m.Shards, name)
		m.Checkpointers = append(m.Checkpointers, cp)
		m.sources = append(m.sources, src)
		m.owner = append(m.owner, w)
	}
	return m, nil
}

// Announcements returns each worker's shards at their epochs, as the
// worker would announce them.
func (m *MemoryShards) Announcements() map[string][]activities.ShardEpoch {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]activities.ShardEpoch{}
	for i, s := range m.Shards {
		out[m.owner[i]] = append(out[m.owner[i]], activities.ShardEpoch{Shard: s, Epoch: streaming.Epoch(m.epochs[i].Load())})
	}
	return out
}

// Move gives shard i to worker at a new epoch (one above the current) and
// returns that epoch, as a cooperative Kafka rebalance does: the old
// owner takes a final checkpoint and releases the shard (its host keeps
// that checkpoint for the handoff's final round), then the new owner
// gains it.
func (m *MemoryShards) Move(ctx context.Context, i int, worker string) (streaming.Epoch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.Checkpointers[i].Checkpoint(ctx); err != nil {
		return 0, fmt.Errorf("final checkpoint of %s before the move: %w", m.Shards[i], err)
	}
	m.Hosts[m.owner[i]].Unregister(m.Pipeline, m.Shards[i])
	e := m.epochs[i].Add(1)
	m.Hosts[worker].Register(m.Pipeline, m.Shards[i], m.Checkpointers[i])
	m.owner[i] = worker
	return streaming.Epoch(e), nil
}

// Touch changes every key of every shard.
func (m *MemoryShards) Touch() {
	for _, s := range m.sources {
		s.touch()
	}
}

// keySource is a CheckpointSource of fixed keys whose values change on
// touch; a cut holds the keys changed since the last saved one.
type keySource struct {
	mu     sync.Mutex
	keys   int
	value  []byte
	seq    uint64
	dirty  bool
	cutOut bool
}

func newKeySource(keys, valueBytes int) *keySource {
	return &keySource{keys: keys, value: make([]byte, valueBytes), dirty: true}
}

func (s *keySource) touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	// As much of seq as the value holds: a value under 8 bytes is allowed.
	var seq [8]byte
	binary.LittleEndian.PutUint64(seq[:], s.seq)
	copy(s.value, seq[:])
	s.dirty = true
}

func (s *keySource) Cut(context.Context) (streaming.Cut, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cutOut {
		return nil, fmt.Errorf("key source: a cut is already pending")
	}
	s.cutOut = true
	c := &keyCut{src: s, seq: s.seq}
	if s.dirty {
		c.keys, c.value = s.keys, append([]byte(nil), s.value...)
		s.dirty = false
	}
	return c, nil
}

func (s *keySource) Restore(_ context.Context, _ string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	for _, err := range pieces {
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(cursor) == 8 {
		s.seq = binary.BigEndian.Uint64(cursor)
	}
	return nil
}

// MergeRuns implements streaming.RunMerger: every cut of a keySource holds
// every key, so the newest run is the whole state.
func (s *keySource) MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	var last [][]byte
	for _, run := range runs {
		last = last[:0]
		for p, err := range run {
			if err != nil {
				return err
			}
			last = append(last, append([]byte(nil), p...))
		}
	}
	for _, p := range last {
		if err := emit(p); err != nil {
			return err
		}
	}
	return ctx.Err()
}

type keyCut struct {
	src   *keySource
	seq   uint64
	keys  int
	value []byte
}

func (c *keyCut) Cursor() (string, []byte) { return "seq", binary.BigEndian.AppendUint64(nil, c.seq) }

// Pieces emits the changed keys, 64 to a piece.
func (c *keyCut) Pieces(ctx context.Context, emit func([]byte) error) error {
	var piece []byte
	for k := range c.keys {
		piece = binary.AppendUvarint(piece, uint64(k))
		piece = append(piece, c.value...)
		if (k+1)%64 == 0 {
			if err := emit(piece); err != nil {
				return err
			}
			piece = piece[:0]
		}
	}
	if len(piece) > 0 {
		return emit(piece)
	}
	return ctx.Err()
}

func (c *keyCut) Release(saved bool) {
	s := c.src
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cutOut = false
	if !saved && c.keys > 0 {
		s.dirty = true
	}
}

// HandoffHost returns worker's side of handoffs over these shards: restore
// and resume answer for a shard the worker owns at the epoch asked (the
// shard's state is in the shared store, so restore reports its newest
// checkpoint); the final checkpoint is taken on the spot.
func (m *MemoryShards) HandoffHost(worker string) activities.ShardHost {
	return memoryHandoffs{m, worker}
}

type memoryHandoffs struct {
	m      *MemoryShards
	worker string
}

func (h memoryHandoffs) owned(shard streaming.ShardID, epoch streaming.Epoch) (*streaming.Checkpointer, error) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	for i, s := range h.m.Shards {
		if s == shard && h.m.owner[i] == h.worker && h.m.epochs[i].Load() == uint64(epoch) {
			return h.m.Checkpointers[i], nil
		}
	}
	return nil, fmt.Errorf("worker %q does not own shard %s at epoch %d: %w", h.worker, shard, uint64(epoch), streaming.ErrFenced)
}

func (h memoryHandoffs) FinalCheckpoint(ctx context.Context, _ string, shard streaming.ShardID, epoch streaming.Epoch) (activities.CheckpointSummary, error) {
	cp, err := h.owned(shard, epoch)
	if err != nil {
		return activities.CheckpointSummary{}, err
	}
	res, err := cp.Checkpoint(ctx)
	if err != nil {
		return activities.CheckpointSummary{}, err
	}
	return activities.CheckpointSummary{CheckpointID: uint64(res.ID), Epoch: res.Epoch, Cursor: cp.Status().LastCursor, Bytes: res.Bytes, Duration: res.Duration}, nil
}

func (h memoryHandoffs) Restore(_ context.Context, _ string, shard streaming.ShardID, epoch streaming.Epoch) (activities.RestoreSummary, error) {
	cp, err := h.owned(shard, epoch)
	if err != nil {
		return activities.RestoreSummary{}, err
	}
	st := cp.Status()
	return activities.RestoreSummary{CheckpointID: uint64(st.LastID), Epoch: st.LastEpoch, Cursor: st.LastCursor, Bytes: st.StateBytes}, nil
}

func (h memoryHandoffs) Resume(_ context.Context, _ string, shard streaming.ShardID, epoch streaming.Epoch) error {
	_, err := h.owned(shard, epoch)
	return err
}

func (h memoryHandoffs) Held() []activities.HeldShard {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	var out []activities.HeldShard
	for i, s := range h.m.Shards {
		if h.m.owner[i] == h.worker {
			out = append(out, activities.HeldShard{Pipeline: h.m.Pipeline, Shard: s, Epoch: streaming.Epoch(h.m.epochs[i].Load()), WorkerID: h.worker})
		}
	}
	return out
}
