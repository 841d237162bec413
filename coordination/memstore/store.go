package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tflo-io/tflo/coordination"
)

// ErrUnavailable is the cause of every error while the store is switched
// off with SetAvailable(false).
var ErrUnavailable = errors.New("memstore: store unavailable (fault injected)")

// ErrWatchBroken is the cause of the Retryable error that ends a watch
// broken by BreakWatches or by a backlog above WithMaxWatchBacklog.
var ErrWatchBroken = errors.New("memstore: watch stream broken")

type item struct {
	value   []byte
	rev     coordination.Revision
	expires time.Time // zero for durable keys
	timer   coordination.Timer
}

// Store is the in-memory coordination store.
type Store struct {
	cfg config

	mu       sync.Mutex
	rev      coordination.Revision
	data     map[coordination.Keyspace]map[string]*item
	watchers map[*watcher]struct{}
	down     bool
}

var _ coordination.Store = (*Store)(nil)

// New returns an empty store.
func New(opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Store{
		cfg: cfg,
		data: map[coordination.Keyspace]map[string]*item{
			coordination.Durable:   {},
			coordination.Ephemeral: {},
		},
		watchers: map[*watcher]struct{}{},
	}, nil
}

// LeaseTTL returns the configured TTL.
func (s *Store) LeaseTTL() time.Duration { return s.cfg.ttl }

// SetAvailable switches fault injection: while unavailable every call fails
// with a Retryable error wrapping ErrUnavailable and every open watch is
// broken. Ephemeral keys keep expiring.
func (s *Store) SetAvailable(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = !up
	if !up {
		s.breakLocked()
	}
}

// BreakWatches ends every open watch with a Retryable error wrapping
// ErrWatchBroken, dropping whatever the consumers had not yet received.
func (s *Store) BreakWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.breakLocked()
}

func (s *Store) breakLocked() {
	for w := range s.watchers {
		w.fail(coordination.Retryable("watch", w.ks, w.prefix, ErrWatchBroken))
		delete(s.watchers, w)
	}
}

func (s *Store) begin(op string, ks coordination.Keyspace, key string, isPrefix bool) error {
	if ks != coordination.Durable && ks != coordination.Ephemeral {
		return coordination.Fatal(op, ks, key, fmt.Errorf("unknown keyspace %d", uint8(ks)))
	}
	if isPrefix {
		if err := coordination.CheckPrefix(op, ks, key); err != nil {
			return err
		}
	} else if err := coordination.CheckKey(op, ks, key); err != nil {
		return err
	}
	if s.down {
		return coordination.Retryable(op, ks, key, ErrUnavailable)
	}
	return nil
}

// live returns the key's item if it exists and has not expired, applying a
// due expiry on the way. Called with s.mu held.
func (s *Store) live(ks coordination.Keyspace, key string) *item {
	it := s.data[ks][key]
	if it == nil {
		return nil
	}
	if !it.expires.IsZero() && !s.cfg.clock.Now().Before(it.expires) {
		s.removeLocked(ks, key, it)
		return nil
	}
	return it
}

func (s *Store) removeLocked(ks coordination.Keyspace, key string, it *item) coordination.Revision {
	if it.timer != nil {
		it.timer.Stop()
	}
	delete(s.data[ks], key)
	s.rev++
	s.publishLocked(ks, coordination.WatchEvent{Kind: coordination.EventDelete, Entry: coordination.Entry{Key: key, Revision: s.rev}})
	return s.rev
}

func (s *Store) writeLocked(ks coordination.Keyspace, key string, value []byte, old *item) coordination.Revision {
	s.rev++
	it := &item{value: append([]byte(nil), value...), rev: s.rev}
	if old != nil && old.timer != nil {
		old.timer.Stop()
	}
	if ks == coordination.Ephemeral {
		it.expires = s.cfg.clock.Now().Add(s.cfg.ttl)
		rev := it.rev
		it.timer = s.cfg.clock.AfterFunc(s.cfg.ttl, func() { s.expire(ks, key, rev) })
		it.timer.ResetAt(it.expires) // exactly at the expiry Get and List apply
	}
	s.data[ks][key] = it
	s.publishLocked(ks, coordination.WatchEvent{Kind: coordination.EventPut, Entry: coordination.Entry{Key: key, Value: it.value, Revision: it.rev}})
	return it.rev
}

func (s *Store) expire(ks coordination.Keyspace, key string, rev coordination.Revision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.data[ks][key]; it != nil && it.rev == rev {
		s.live(ks, key)
	}
}

func (s *Store) publishLocked(ks coordination.Keyspace, ev coordination.WatchEvent) {
	for w := range s.watchers {
		if w.ks != ks || !strings.HasPrefix(ev.Key, w.prefix) {
			continue
		}
		// Each watcher owns its event's value (the contract: values
		// returned are the caller's): the stored value stays the store's.
		own := ev
		own.Value = bytes.Clone(ev.Value)
		if !w.push(own, s.cfg.maxBacklog) {
			delete(s.watchers, w)
		}
	}
}

// Create writes key if absent.
func (s *Store) Create(ctx context.Context, ks coordination.Keyspace, key string, value []byte) (coordination.CasOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("create", ks, key, false); err != nil {
		return coordination.Lost, err
	}
	if err := ctx.Err(); err != nil {
		return coordination.Lost, coordination.Retryable("create", ks, key, err)
	}
	if s.live(ks, key) != nil {
		return coordination.Lost, nil
	}
	return coordination.WonAt(s.writeLocked(ks, key, value, nil)), nil
}

// Update replaces key iff it is at expected.
func (s *Store) Update(ctx context.Context, ks coordination.Keyspace, key string, value []byte, expected coordination.Revision) (coordination.CasOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("update", ks, key, false); err != nil {
		return coordination.Lost, err
	}
	if err := ctx.Err(); err != nil {
		return coordination.Lost, coordination.Retryable("update", ks, key, err)
	}
	it := s.live(ks, key)
	if it == nil || it.rev != expected {
		return coordination.Lost, nil
	}
	return coordination.WonAt(s.writeLocked(ks, key, value, it)), nil
}

// Get reads key.
func (s *Store) Get(ctx context.Context, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("get", ks, key, false); err != nil {
		return coordination.Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return coordination.Entry{}, coordination.Retryable("get", ks, key, err)
	}
	it := s.live(ks, key)
	if it == nil {
		return coordination.Entry{}, coordination.NotFound(ks, key)
	}
	return coordination.Entry{Key: key, Value: append([]byte(nil), it.value...), Revision: it.rev}, nil
}

// Delete removes key, guarded by expected when non-zero.
func (s *Store) Delete(ctx context.Context, ks coordination.Keyspace, key string, expected coordination.Revision) (coordination.CasOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("delete", ks, key, false); err != nil {
		return coordination.Lost, err
	}
	if err := ctx.Err(); err != nil {
		return coordination.Lost, coordination.Retryable("delete", ks, key, err)
	}
	it := s.live(ks, key)
	if it == nil {
		return coordination.WonAt(0), nil
	}
	if expected != 0 && it.rev != expected {
		return coordination.Lost, nil
	}
	return coordination.WonAt(s.removeLocked(ks, key, it)), nil
}

// List returns every live key under prefix, sorted.
func (s *Store) List(ctx context.Context, ks coordination.Keyspace, prefix string) ([]coordination.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("list", ks, prefix, true); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, coordination.Retryable("list", ks, prefix, err)
	}
	return s.snapshotLocked(ks, prefix), nil
}

func (s *Store) snapshotLocked(ks coordination.Keyspace, prefix string) []coordination.Entry {
	var out []coordination.Entry
	for key := range s.data[ks] {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if it := s.live(ks, key); it != nil {
			out = append(out, coordination.Entry{Key: key, Value: append([]byte(nil), it.value...), Revision: it.rev})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Watch starts a snapshot-then-live watch of prefix.
func (s *Store) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("watch", ks, prefix, true); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, coordination.Retryable("watch", ks, prefix, err)
	}
	w := newWatcher(ks, prefix)
	for _, e := range s.snapshotLocked(ks, prefix) {
		w.queue = append(w.queue, coordination.WatchEvent{Kind: coordination.EventPut, Entry: e})
	}
	w.queue = append(w.queue, coordination.WatchEvent{Kind: coordination.EventSnapshotDone})
	w.snap = len(w.queue)
	s.watchers[w] = struct{}{}
	ctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.unregister = func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}
	go w.run(ctx)
	return w, nil
}
