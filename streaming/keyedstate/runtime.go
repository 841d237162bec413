package keyedstate

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"github.com/tflo-io/tflo/streaming"
)

// Runtime keeps one graph instance per key: hot keys cached in memory, the
// rest in Badger. See the package doc for memory, checkpoints and
// concurrency.
type Runtime[K comparable] struct {
	g        *streaming.Graph
	codec    KeyCodec[K]
	db       *badger.DB
	cfg      config
	capacity int
	entrySz  int

	mu     sync.Mutex
	tx     Tx[K]
	closed bool
	err    error // sticky: a failed flush

	cache map[K]*entry[K]
	ring  []*entry[K] // CLOCK ring of every entry, live or free
	hand  int

	gen   uint64         // current generation; keys changed in it are in dirty
	dirty map[K]struct{} // keys changed since the last cut
	cut   *cut[K]        // the pending cut, or nil
	ctype string         // cursor of the last applied record
	cur   []byte

	pending      map[string][]byte // write-behind: encoded key -> state (nil: deleted)
	pendingBytes int
	flushing     map[string][]byte // the batch the flusher is writing, or nil
	flushCh      chan map[string][]byte
	flushDone    chan error
	loopDone     chan struct{}

	keyBuf []byte
	fkBuf  []byte
	valBuf []byte
	stats  Stats
}

var (
	_ streaming.CheckpointSource = (*Runtime[string])(nil)
	_ streaming.RunMerger        = (*Runtime[string])(nil)
)

type entry[K comparable] struct {
	key     K
	inst    *streaming.Instance
	live    bool   // in the cache
	ref     bool   // CLOCK reference bit
	changed bool   // state differs from the stored copy (buffer or Badger)
	gen     uint64 // generation in which the key was last marked changed
}

// Stats are counters for tests, benchmarks and metrics.
type Stats struct {
	Cached        int           // keys in the cache
	Capacity      int           // most keys the cache holds
	EntryBytes    int           // memory one cached key is counted at
	Hits, Misses  uint64        // cache lookups
	Evictions     uint64        // keys evicted from the cache
	Flushes       uint64        // write-behind batches handed to the flusher
	FlushWaits    uint64        // times the hot path waited for the flusher
	PendingBytes  int           // bytes in the write-behind buffer
	DirtyKeys     int           // keys changed since the last cut
	CutPending    bool          // a cut is pending
	CapturedKeys  int           // states saved aside by copy-on-write for the pending cut
	LastCutStall  time.Duration // how long marking the last cut held the lock
	SaveHoldMax   time.Duration // longest the saver held the lock for one chunk of keys
	RestoredItems uint64        // entries written by the last Restore
}

// New returns a Runtime over g whose overflow lives in db under the
// configured prefix. db is not closed by Close.
func New[K comparable](g *streaming.Graph, codec KeyCodec[K], db *badger.DB, opts ...Option) (*Runtime[K], error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if g == nil || codec == nil || db == nil {
		return nil, errors.New("keyedstate: graph, key codec and badger DB must not be nil")
	}
	sz := cfg.entryBytes
	if sz == 0 {
		sz = measureEntryBytes[K](g)
	}
	capacity := int((cfg.budget - int64(2*cfg.writeBatchBytes)) / int64(sz))
	if capacity < 1 {
		return nil, fmt.Errorf("keyedstate: memory budget %d bytes holds no key of %d bytes after two write batches of %d bytes", cfg.budget, sz, cfg.writeBatchBytes)
	}
	r := &Runtime[K]{
		g: g, codec: codec, db: db, cfg: cfg, capacity: capacity, entrySz: sz,
		cache:     make(map[K]*entry[K], min(capacity, 1<<16)),
		gen:       1,
		dirty:     make(map[K]struct{}),
		pending:   make(map[string][]byte),
		flushCh:   make(chan map[string][]byte, 1),
		flushDone: make(chan error, 1),
		loopDone:  make(chan struct{}),
	}
	r.tx.r = r
	go r.flushLoop()
	return r, nil
}

// measureEntryBytes estimates what one cached key costs: the live heap
// that n instances, their entries, a map and a ring of them take (after a
// GC, so only live bytes count), and at least the bytes allocated to build
// them.
func measureEntryBytes[K comparable](g *streaming.Graph) int {
	const n = 2048
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ring := make([]*entry[K], n)
	m := make(map[int]*entry[K])
	in := make([]streaming.Computed, len(g.Inputs()))
	for i := range in {
		in[i] = streaming.Float(1)
	}
	for i := range ring {
		ring[i] = &entry[K]{inst: g.NewInstance()}
		m[i] = ring[i]
		// Warm the instance: operators that allocate on first use count.
		for ts := range 16 {
			ring[i].inst.Eval(int64(ts), in...)
		}
	}
	runtime.ReadMemStats(&after)
	allocated := int(after.TotalAlloc-before.TotalAlloc) / n
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := (int(after.HeapAlloc) - int(before.HeapAlloc)) / n
	runtime.KeepAlive(ring)
	runtime.KeepAlive(m)
	var k K
	// The map above is keyed by int; add the difference for K.
	return max(live, allocated) + max(int(unsafe.Sizeof(k))-8, 0)
}

// Capacity returns the most keys the cache holds.
func (r *Runtime[K]) Capacity() int { return r.capacity }

// Graph returns the template graph.
func (r *Runtime[K]) Graph() *streaming.Graph { return r.g }

// Tx is the hot path's handle inside Process. It must not be used after
// fn returns.
type Tx[K comparable] struct{ r *Runtime[K] }

func (r *Runtime[K]) usable() error {
	if r.closed {
		return ErrClosed
	}
	return r.err
}

// Process runs fn with exclusive access to the state: no cut falls inside
// fn, so the records fn applies and the cursor it sets are cut together.
// It returns fn's error, or the sticky error of a failed flush.
func (r *Runtime[K]) Process(fn func(tx *Tx[K]) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return err
	}
	return fn(&r.tx)
}

// Apply evaluates one record of key and records its cursor, atomically
// with respect to cuts. The returned instance may be read until the
// caller's next call on r.
func (r *Runtime[K]) Apply(key K, ts int64, cursorType string, cursor []byte, inputs ...streaming.Computed) (*streaming.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return nil, err
	}
	in, err := r.tx.Eval(key, ts, inputs...)
	if err != nil {
		return nil, err
	}
	r.tx.SetCursor(cursorType, cursor)
	return in, nil
}

// Eval runs one record of key through its instance (loading it from the
// write-behind buffer or Badger on a miss) and returns the instance.
func (tx *Tx[K]) Eval(key K, ts int64, inputs ...streaming.Computed) (*streaming.Instance, error) {
	r := tx.r
	e, ok := r.cache[key]
	if ok {
		e.ref = true
		r.stats.Hits++
	} else {
		var err error
		if e, err = r.load(key); err != nil {
			return nil, err
		}
	}
	if e.gen != r.gen {
		if err := r.markChanged(e); err != nil {
			return nil, err
		}
	}
	e.inst.Eval(ts, inputs...)
	e.changed = true
	return e.inst, nil
}

// SetCursor records the position of the last record applied; the next cut
// carries it. cursor is copied.
func (tx *Tx[K]) SetCursor(cursorType string, cursor []byte) {
	tx.r.ctype = cursorType
	tx.r.cur = append(tx.r.cur[:0], cursor...)
}

// Delete forgets key and its state; the next checkpoint records the
// deletion.
func (tx *Tx[K]) Delete(key K) error {
	r := tx.r
	if e, ok := r.cache[key]; ok {
		if c := r.cut; c != nil && e.gen == c.gen {
			if err := c.capture(e); err != nil {
				return err
			}
		}
		delete(r.cache, key)
		e.live, e.changed, e.gen = false, false, 0
		e.inst.Reset()
	} else if c := r.cut; c != nil && r.genOf(key) == c.gen {
		// Save the cut's state aside before the deletion hides it.
		kb := r.codec.AppendKey(r.keyBuf[:0], key)
		r.keyBuf = kb
		blob, found, err := r.lookupStored(kb)
		if err != nil {
			return err
		}
		if found {
			c.captured[key] = append([]byte(nil), blob...)
		} else {
			c.captured[key] = nil
		}
	}
	kb := r.codec.AppendKey(r.keyBuf[:0], key)
	r.keyBuf = kb
	r.bufferWrite(kb, nil)
	r.dirty[key] = struct{}{}
	return nil
}

// markChanged adds e's key to the current generation, first saving aside
// its state as of a pending cut that contains it (copy-on-write).
func (r *Runtime[K]) markChanged(e *entry[K]) error {
	if c := r.cut; c != nil && e.gen == c.gen {
		if err := c.capture(e); err != nil {
			return err
		}
	}
	e.gen = r.gen
	r.dirty[e.key] = struct{}{}
	return nil
}

// genOf returns the generation a key loaded from storage belongs to.
func (r *Runtime[K]) genOf(key K) uint64 {
	if _, ok := r.dirty[key]; ok {
		return r.gen
	}
	if c := r.cut; c != nil {
		if _, ok := c.keys[key]; ok {
			if _, captured := c.captured[key]; !captured {
				return c.gen
			}
		}
	}
	return 0
}

// load brings key into the cache (a miss).
func (r *Runtime[K]) load(key K) (*entry[K], error) {
	r.stats.Misses++
	r.pollFlush()
	e, err := r.slot()
	if err != nil {
		return nil, err
	}
	kb := r.codec.AppendKey(r.keyBuf[:0], key)
	r.keyBuf = kb
	blob, found, err := r.lookupStored(kb)
	if err != nil {
		return nil, err
	}
	if found {
		if err := e.inst.Load(blob); err != nil {
			e.inst.Reset()
			return nil, fmt.Errorf("keyedstate: state of key %q: %w", kb, err)
		}
	} else {
		e.inst.Reset()
	}
	e.key, e.live, e.ref, e.changed = key, true, true, false
	e.gen = r.genOf(key)
	r.cache[key] = e
	return e, nil
}

// slot returns a free entry, evicting the coldest live one when the cache
// is full.
func (r *Runtime[K]) slot() (*entry[K], error) {
	if len(r.ring) < r.capacity {
		e := &entry[K]{inst: r.g.NewInstance()}
		r.ring = append(r.ring, e)
		return e, nil
	}
	for {
		e := r.ring[r.hand]
		r.hand++
		if r.hand == len(r.ring) {
			r.hand = 0
		}
		if !e.live {
			return e, nil
		}
		if e.ref {
			e.ref = false
			continue
		}
		if err := r.evict(e); err != nil {
			return nil, err
		}
		return e, nil
	}
}

// evict writes e's state behind if it changed and frees the entry. The
// written state is the state as of a pending cut when e is in it
// untouched since, so the saver can read it from the buffer or Badger.
func (r *Runtime[K]) evict(e *entry[K]) error {
	if e.changed {
		blob, err := e.inst.AppendSave(make([]byte, 0, 64))
		if err != nil {
			return fmt.Errorf("keyedstate: evict key %v: %w", e.key, err)
		}
		kb := r.codec.AppendKey(r.keyBuf[:0], e.key)
		r.keyBuf = kb
		r.bufferWrite(kb, blob)
	}
	delete(r.cache, e.key)
	e.live, e.changed = false, false
	r.stats.Evictions++
	return nil
}

// bufferWrite adds a write (nil state: a deletion) to the write-behind
// buffer and hands a full buffer to the flusher.
func (r *Runtime[K]) bufferWrite(kb, state []byte) {
	old, had := r.pending[string(kb)]
	if had {
		r.pendingBytes -= len(old)
	} else {
		r.pendingBytes += len(kb) + 48
	}
	r.pending[string(kb)] = state
	r.pendingBytes += len(state)
	if r.pendingBytes >= r.cfg.writeBatchBytes {
		r.startFlush()
	}
}

// startFlush hands the buffer to the flusher, first waiting for the batch
// before it (at most one batch in flight: back-pressure, not a queue).
func (r *Runtime[K]) startFlush() {
	if len(r.pending) == 0 {
		return
	}
	if r.flushing != nil {
		r.stats.FlushWaits++
		r.finishFlush(<-r.flushDone)
	}
	r.flushing = r.pending
	r.pending = make(map[string][]byte, len(r.flushing))
	r.pendingBytes = 0
	r.stats.Flushes++
	r.flushCh <- r.flushing
}

func (r *Runtime[K]) finishFlush(err error) {
	r.flushing = nil
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("keyedstate: write-behind flush: %w", err)
	}
}

// pollFlush notices a finished flush without waiting.
func (r *Runtime[K]) pollFlush() {
	if r.flushing == nil {
		return
	}
	select {
	case err := <-r.flushDone:
		r.finishFlush(err)
	default:
	}
}

// flushLoop is the flusher goroutine, owned by the Runtime (stopped by
// Close).
func (r *Runtime[K]) flushLoop() {
	defer close(r.loopDone)
	for batch := range r.flushCh {
		r.flushDone <- r.writeBatch(batch)
	}
}

func (r *Runtime[K]) writeBatch(batch map[string][]byte) error {
	wb := r.db.NewWriteBatch()
	defer wb.Cancel()
	for k, v := range batch {
		key := make([]byte, 0, len(r.cfg.prefix)+len(k))
		key = append(append(key, r.cfg.prefix...), k...)
		var err error
		if v == nil {
			err = wb.Delete(key)
		} else {
			err = wb.Set(key, v)
		}
		if err != nil {
			return err
		}
	}
	return wb.Flush()
}

func (r *Runtime[K]) fullKey(kb []byte) []byte {
	r.fkBuf = append(append(r.fkBuf[:0], r.cfg.prefix...), kb...)
	return r.fkBuf
}

// lookupStored finds a key's stored state: write-behind buffer, the batch
// in flight, then Badger. The returned slice is valid until the next
// lookup.
func (r *Runtime[K]) lookupStored(kb []byte) ([]byte, bool, error) {
	if b, ok := r.pending[string(kb)]; ok {
		return b, b != nil, nil
	}
	if r.flushing != nil {
		if b, ok := r.flushing[string(kb)]; ok {
			return b, b != nil, nil
		}
	}
	found := false
	err := r.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(r.fullKey(kb))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		r.valBuf, err = item.ValueCopy(r.valBuf[:0])
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("keyedstate: read key %q: %w", kb, err)
	}
	return r.valBuf, found, nil
}

// Flush writes the write-behind buffer to Badger and waits for it.
func (r *Runtime[K]) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return err
	}
	r.startFlush()
	if r.flushing != nil {
		r.finishFlush(<-r.flushDone)
	}
	return r.err
}

// Close drains the write-behind buffer to Badger and stops the flusher.
// It does not checkpoint. Close is idempotent.
func (r *Runtime[K]) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.startFlush()
	if r.flushing != nil {
		r.finishFlush(<-r.flushDone)
	}
	r.closed = true
	close(r.flushCh)
	err := r.err
	r.mu.Unlock()
	<-r.loopDone
	return err
}

// Stats returns the runtime's counters.
func (r *Runtime[K]) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Cached = len(r.cache)
	s.Capacity = r.capacity
	s.EntryBytes = r.entrySz
	s.PendingBytes = r.pendingBytes
	s.DirtyKeys = len(r.dirty)
	if r.cut != nil {
		s.CutPending = true
		s.CapturedKeys = len(r.cut.captured)
	}
	return s
}

// Get returns a copy of key's saved state (Instance.Save's blob) wherever
// it lives, and false for a key never seen or deleted. For tests and
// tools; it does not load the key into the cache.
func (r *Runtime[K]) Get(key K) ([]byte, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.cache[key]; ok {
		b, err := e.inst.AppendSave(make([]byte, 0, 64))
		return b, true, err
	}
	kb := r.codec.AppendKey(r.keyBuf[:0], key)
	r.keyBuf = kb
	b, found, err := r.lookupStored(kb)
	if err != nil || !found {
		return nil, false, err
	}
	return append([]byte(nil), b...), true, nil
}
