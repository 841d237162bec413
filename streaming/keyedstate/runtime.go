package keyedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
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
	g       *streaming.Graph
	codec   KeyCodec[K]
	db      *badger.DB
	gate    *dbGate // shared by the runtimes on db: writes hold its read side (see compact.go)
	cfg     config
	entrySz int
	dbBytes int64 // Badger's memtables and caches counted in the budget
	avail   int64 // budget − GC headroom − dbBytes − two write batches: cache + changed keys + cut

	mu     sync.Mutex
	tx     Tx[K]
	closed bool
	err    error // sticky: a failed flush

	cache  map[K]*entry[K]
	ring   []*entry[K] // CLOCK ring of every entry, live or free
	hand   int
	sketch *freqSketch[K] // how often keys were used lately: admission to a full cache (nil: every key enters)
	spare  *entry[K]      // the entry of a key the full cache did not admit, for one record

	// Generations: every change is stamped with the generation it happened
	// in (entry.gen, the header of a stored state, deleted). A cut closes
	// the current generation. Changes of generations up to savedGen are in
	// a saved checkpoint; a pending cut holds those in (savedGen, cut.gen].
	gen      uint64
	savedGen uint64
	dirty    keyList      // keys changed in generations > savedGen not held by a pending cut
	deleted  map[K]uint64 // keys deleted in generations > savedGen: the generation
	cut      *cut[K]      // the pending cut, or nil
	nextRun  uint64       // id of the last run of changed keys spilled
	oldRuns  []spilledRun // runs of saved cuts whose deletion failed, retried
	dropped  []string     // nodes whose stored state is never loaded (DropNodes)
	ctype    string       // cursor of the last applied record
	cur      []byte
	keys     int   // keys held (cache, write-behind, Badger): WithMaxKeys
	clock    int64 // unix seconds of the current Process call when keys expire

	pending   *batch[K] // write-behind: states of evicted or deleted keys
	flushing  *batch[K] // the batch the flusher is writing, or nil
	flushCh   chan *batch[K]
	flushDone chan error
	loopDone  chan struct{}
	rview     *readView // read view of the hot path, renewed after every flush

	// Failed value-log GCs (the flusher's, after a written batch): not
	// flush errors, the batch is in Badger and the next GC retries.
	gcMu      sync.Mutex
	gcErrs    uint64
	gcLastErr error

	keyBuf []byte
	fkBuf  []byte
	valBuf []byte
	stats  Stats
}

var (
	_ streaming.CheckpointSource = (*Runtime[string])(nil)
	_ streaming.RunMerger        = (*Runtime[string])(nil)
	_ streaming.NodeDropper      = (*Runtime[string])(nil)
)

type entry[K comparable] struct {
	key     K
	inst    *streaming.Instance
	live    bool   // in the cache
	ref     bool   // CLOCK reference bit
	changed bool   // state differs from the stored copy (buffer or Badger)
	absent  bool   // loaded as a key with no state (never seen or deleted), not changed since
	gen     uint64 // generation of the key's last change (0: none since a restore)
	seen    int64  // unix seconds of its last record (WithKeyTTL), or of the restore
}

// Stats are counters for tests, benchmarks and metrics.
type Stats struct {
	Cached        int           // keys in the cache
	Capacity      int           // most keys the cache holds now (shrinks while changed keys and a cut take memory)
	EntryBytes    int           // memory one cached key is counted at
	Hits, Misses  uint64        // cache lookups
	NotAdmitted   uint64        // misses a full cache did not take in: the key was used less lately than the coldest cached one
	SamplePeriod  float64       // uses per cached key between two halvings of the admission's counts (adapts; 0: no admission sketch)
	Evictions     uint64        // keys evicted from the cache
	Flushes       uint64        // write-behind batches handed to the flusher
	FlushWaits    uint64        // times the hot path waited for the flusher
	PendingBytes  int           // bytes in the write-behind buffer
	DirtyKeys     int           // keys recorded as changed since the last saved cut and not in a pending one
	CutPending    bool          // a cut is pending
	CapturedKeys  int           // states saved aside by copy-on-write for the pending cut
	LastCutStall  time.Duration // how long marking the last cut held the lock
	SaveHoldMax   time.Duration // longest the saver held the lock for one chunk of keys
	RestoredItems uint64        // entries written by the last Restore
	// RestoreCompaction is how long the last Restore spent compacting
	// the DB (Badger's Flatten, waiting for the gate included; see
	// compact.go): 0 when it wrote less than a memtable and skipped it,
	// at least a nanosecond when it ran (Flatten returns at once when the
	// tree already has one level).
	RestoreCompaction time.Duration
	Rejected          uint64 // records an operator refused (streaming.Rejected), counted by Tx.Eval
	Spills            uint64 // lists of changed keys spilled to Badger (they outgrew their part of the budget)
	Keys              int    // keys held, in memory and in Badger (counted from the last Restore)
	KeysRefused       uint64 // records of new keys refused at the key cap (WithMaxKeys)
	Expired           uint64 // keys deleted by ExpireIdle (WithKeyTTL)
	Quarantined       uint64 // keys whose stored state did not load and was reset (WithQuarantine)
	// ValueLogGCErrors counts the value-log garbage collections that
	// failed (after a write-behind flush that succeeded: the flush and the
	// runtime carry on, and the next GC retries); ValueLogGCError is the
	// last one's error (nil: none failed).
	ValueLogGCErrors uint64
	ValueLogGCError  error

	// Memory, in bytes, as counted against the budget.
	Budget       int64 // WithMemoryBudget
	GCHeadroom   int64 // the part of it left to the garbage collector
	BadgerBytes  int64 // Badger's memtables and caches (this runtime's share)
	CacheBytes   int64 // cache entries, live or free
	SketchBytes  int64 // the admission's frequency sketch
	BatchBytes   int64 // the two write batches (the one filling, the one being written)
	ChangedBytes int64 // changed-key lists, deleted keys, a pending cut's sorted keys and copied states
}

// MemoryBytes is what the runtime counts against its budget now:
// Badger's share, the cache, the admission sketch, the write batches and
// the change bookkeeping (the budget less the GC headroom bounds it).
func (s Stats) MemoryBytes() int64 {
	return s.BadgerBytes + s.CacheBytes + s.SketchBytes + s.BatchBytes + s.ChangedBytes
}

// New returns a Runtime over g whose overflow lives in db under the
// configured prefix. db is not closed by Close. Keys an earlier process
// left under the prefix are not cleared: Restore before the first
// record. The memory budget
// (WithMemoryBudget) covers Badger's memtables and caches as db is
// configured (see BadgerOptions and WithDBShare); New fails when they and
// two write batches leave no room for a cached key.
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
		sz = EntryBytes[K](g)
	}
	dbBytes, avail, err := cfg.available(db, sz, 0)
	if err != nil {
		return nil, err
	}
	// The admission's sketch, sized for the most keys the cache holds,
	// when it leaves room for a few hundred of them.
	var sketch *freqSketch[K]
	if n := int(avail / int64(sz)); n >= 512 && avail-sketchBytes(n) >= 256*int64(sz) {
		sketch = newFreqSketch[K](n)
		avail -= sketchBytes(n)
	}
	r := &Runtime[K]{
		g: g, codec: codec, db: db, cfg: cfg, entrySz: sz, dbBytes: dbBytes, avail: avail, sketch: sketch,
		cache:     make(map[K]*entry[K], min(avail/int64(sz), 1<<16)),
		gen:       1,
		deleted:   make(map[K]uint64),
		pending:   newBatch[K](cfg.writeBatchBytes),
		flushCh:   make(chan *batch[K], 1),
		flushDone: make(chan error, 1),
		loopDone:  make(chan struct{}),
	}
	r.tx.r = r
	r.gate = acquireGate(db)
	go r.flushLoop()
	return r, nil
}

// available returns what Badger's memtables and caches take of c's
// budget (c.dbShare's part of them) and what the budget leaves for the
// cache, the change bookkeeping and a cut, after the GC headroom, two
// write batches and the admission sketch (sketch bytes); an error when
// that holds no key of sz bytes.
func (c *config) available(db *badger.DB, sz int, sketch int64) (dbBytes, avail int64, err error) {
	dbBytes = BadgerBytes(db.Opts()) / int64(c.dbShare)
	live := int64(float64(c.budget) * (1 - c.gcHeadroom))
	avail = live - dbBytes - int64(2*c.writeBatchBytes) - sketch
	if avail < int64(sz) {
		return 0, 0, fmt.Errorf("%w: %d bytes (%d after the GC headroom) hold no key of %d bytes after Badger's memtables and caches (%d bytes; open the DB with keyedstate.BadgerOptions to size them from the budget), two write batches of %d bytes and the admission sketch (%d bytes)",
			ErrBudgetTooSmall, c.budget, live, sz, dbBytes, c.writeBatchBytes, sketch)
	}
	return dbBytes, avail, nil
}

// Resize gives the running runtime a new memory budget and DB share (as
// WithMemoryBudget and WithDBShare): a worker whose shards come and go
// splits its budget among the shards it holds. A smaller budget evicts
// down to the new capacity before Resize returns (changed states are
// written behind); a larger one lets the cache grow as keys come. The
// write batch size and the admission sketch keep the sizes New gave them
// (a cache grown past what the sketch was sized for admits less
// precisely). A budget that holds no key is refused and changes nothing.
func (r *Runtime[K]) Resize(budget int64, dbShare int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return err
	}
	cfg := r.cfg
	cfg.budget, cfg.dbShare = budget, dbShare
	if err := cfg.validate(); err != nil {
		return err
	}
	dbBytes, avail, err := cfg.available(r.db, r.entrySz, r.sketchBytes())
	if err != nil {
		return err
	}
	// Field by field: the flusher reads the config's prefix meanwhile.
	r.cfg.budget, r.cfg.dbShare, r.dbBytes, r.avail = budget, dbShare, dbBytes, avail
	return r.shrink()
}

// sketchBytes is the admission sketch's memory (0 without one).
func (r *Runtime[K]) sketchBytes() int64 {
	if r.sketch == nil {
		return 0
	}
	return int64(len(r.sketch.blocks))
}

// EntryBytes measures what one cached key of g costs (New's default for
// WithEntryBytes): the median of three measurements of the live heap
// that instances of g and their cache entries take (measureEntryBytes).
// It counts only what stays live: the bytes allocated meanwhile would
// also count other goroutines' garbage (a running hot path's), which
// inflated the measure tenfold under load and gave a runtime made for a
// shard gained in a rebalance a tenth of the cache its budget buys. The
// median leaves out a measurement that other goroutines' retaining or
// freeing memory moved. Measure once and give the result to every
// runtime of the graph (as pipeline workers do): each measurement runs
// two garbage collections.
func EntryBytes[K comparable](g *streaming.Graph) int {
	var tries [3]int
	for i := range tries {
		tries[i] = measureEntryBytes[K](g)
	}
	slices.Sort(tries[:])
	// At least the entry and the instance themselves.
	return max(tries[1], int(unsafe.Sizeof(entry[K]{})+unsafe.Sizeof(streaming.Instance{})))
}

// measureEntryBytes measures what one cached key costs: the live heap
// that n warmed instances, their entries, a map and a ring of them take
// (after a GC, so only live bytes count).
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
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := (int(after.HeapAlloc) - int(before.HeapAlloc)) / n
	runtime.KeepAlive(ring)
	runtime.KeepAlive(m)
	var k K
	// The map above is keyed by int; add the difference for K.
	return live + max(int(unsafe.Sizeof(k))-8, 0)
}

// deletedEntryBytes is what one entry of the deleted map is counted at.
func deletedEntryBytes[K comparable]() int {
	var k K
	return int(unsafe.Sizeof(k)) + 8 + 16
}

// changedBytes is the memory of the change bookkeeping (r.mu held).
func (r *Runtime[K]) changedBytes() int64 {
	n := r.dirty.bytes() + len(r.deleted)*deletedEntryBytes[K]()
	if c := r.cut; c != nil {
		n += c.bytes()
	}
	return int64(n)
}

// capacity is the most entries the cache may hold now (r.mu held): what
// the budget leaves after the change bookkeeping, at least one.
func (r *Runtime[K]) capacity() int {
	return int(max((r.avail-r.changedBytes())/int64(r.entrySz), 1))
}

// Capacity returns the most keys the cache holds now.
func (r *Runtime[K]) Capacity() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capacity()
}

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
	r.tick()
	return fn(&r.tx)
}

// tick reads the expiry clock once per call (r.mu held).
func (r *Runtime[K]) tick() {
	if r.cfg.keyTTL > 0 {
		r.clock = r.cfg.now().Unix()
	}
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
	r.tick()
	in, err := r.tx.Eval(key, ts, inputs...)
	if err != nil {
		return nil, err
	}
	r.tx.SetCursor(cursorType, cursor)
	return in, nil
}

// Eval runs one record of key through its instance (loading it from the
// write-behind buffer or Badger on a miss) and returns the instance. A
// record some operator refused (Instance.Rejected() > 0) is counted in
// Stats.Rejected. A record of a new key while the runtime holds its cap
// of keys (WithMaxKeys) is refused with an error wrapping
// ErrTooManyKeys, and a key longer than Badger stores with one wrapping
// ErrKeyTooLong; the runtime carries on.
func (tx *Tx[K]) Eval(key K, ts int64, inputs ...streaming.Computed) (*streaming.Instance, error) {
	r := tx.r
	var h uint64
	if r.sketch != nil {
		h = r.sketch.hash(key)
		r.sketch.add(h)
	}
	e, ok := r.cache[key]
	isNew := false
	if ok {
		e.ref = true
		r.stats.Hits++
		if r.sketch != nil {
			r.sketch.hit()
		}
	} else {
		var err error
		if e, err = r.load(key, h); err != nil {
			return nil, err
		}
		if e.absent { // a new key
			if r.cfg.maxKeys > 0 && r.keys >= r.cfg.maxKeys {
				delete(r.cache, key)
				e.live = false
				r.stats.KeysRefused++
				return nil, fmt.Errorf("new key %s refused: the shard holds %d keys, its cap: %w",
					streaming.QuoteKey(r.keyBytes(key)), r.keys, ErrTooManyKeys)
			}
			r.keys++
			isNew = true
		}
	}
	if e.gen != r.gen {
		if err := r.markChanged(e); err != nil {
			if isNew {
				// No record made the key: it must not stay cached
				// (read back, and saved by a cut, with an empty state)
				// nor counted.
				delete(r.cache, key)
				e.live = false
				r.keys--
			}
			return nil, err
		}
	} else if e.absent {
		// Deleted earlier in this generation (its key is on the changed
		// list since): it exists again, and the cut must save its state,
		// not the deletion.
		delete(r.deleted, e.key)
		e.absent = false
	}
	// After markChanged: a copy-on-write keeps when the key was last seen
	// as of the cut.
	e.seen = r.clock
	e.inst.Eval(ts, inputs...)
	e.changed = true
	if e.inst.Rejected() > 0 {
		r.stats.Rejected++
	}
	if e == r.spare { // not admitted: the state goes straight behind
		if err := r.bufferState(e); err != nil {
			return nil, fmt.Errorf("keyedstate: write key %v behind: %w", key, err)
		}
		e.changed = false
	}
	return e.inst, nil
}

// SetCursor records the position of the last record applied; the next cut
// carries it. cursor is copied.
func (tx *Tx[K]) SetCursor(cursorType string, cursor []byte) {
	tx.r.ctype = cursorType
	tx.r.cur = append(tx.r.cur[:0], cursor...)
}

// inCut reports whether a change of generation gen belongs to the pending
// cut (r.mu held).
func (r *Runtime[K]) inCut(gen uint64) bool {
	return r.cut != nil && gen > r.savedGen && gen <= r.cut.gen
}

// Delete forgets key and its state; the next checkpoint records the
// deletion.
func (tx *Tx[K]) Delete(key K) error {
	r := tx.r
	kb := r.keyBytes(key)
	if err := r.checkKeyLen(kb); err != nil {
		return err
	}
	var gen uint64
	e, cached := r.cache[key]
	if cached {
		gen = e.gen
		if r.inCut(gen) {
			if err := r.cut.capture(e); err != nil {
				return err
			}
		}
	} else {
		sv, ok, err := r.lookupStored(key, kb)
		if err != nil {
			return err
		}
		if !ok {
			// No state to delete (never seen, or deleted already, its
			// deletion recorded): recording it would hold a changed key,
			// a deleted one and a write behind until the next checkpoint.
			return nil
		}
		gen = sv.gen
		if r.inCut(gen) {
			// Save the cut's state aside before the deletion hides it.
			r.cut.keep(key, append(appendHeader(nil, 0, sv.seen), sv.blob...))
		}
	}
	// Record the change before dropping anything: a failed spill leaves
	// the key as it was.
	if !r.listed(gen) {
		if err := r.list(kb, r.inCut(gen)); err != nil {
			return err
		}
	}
	if cached {
		delete(r.cache, key)
		e.live, e.changed, e.absent, e.gen = false, false, false, 0
		e.inst.Reset()
	}
	r.keys--
	r.deleted[key] = r.gen
	r.bufferDelete(key)
	return nil
}

// markChanged stamps e with the current generation, recording its key as
// changed and first saving aside its state as of a pending cut that holds
// it (copy-on-write).
func (r *Runtime[K]) markChanged(e *entry[K]) error {
	inCut := r.inCut(e.gen)
	if inCut {
		if err := r.cut.capture(e); err != nil {
			return err
		}
	}
	if !r.listed(e.gen) {
		if err := r.list(r.keyBytes(e.key), inCut); err != nil {
			return err
		}
	}
	if e.absent && len(r.deleted) > 0 {
		delete(r.deleted, e.key) // it exists again: its entry carries the generation
	}
	e.gen, e.absent = r.gen, false
	return nil
}

// list records kb as changed, a key of the pending cut if inCut, and
// spills the list of changed keys when it outgrew its part of the budget
// (r.mu held). A failed spill takes the key back: the change failed and
// its retry lists the key again, once.
func (r *Runtime[K]) list(kb []byte, inCut bool) error {
	m := r.dirty.mark()
	r.dirty.add(kb)
	if err := r.maybeSpill(); err != nil {
		r.dirty.truncate(m)
		return err
	}
	if inCut {
		r.cut.relisted++
	}
	return nil
}

// listed reports whether a key last changed in generation gen is on the
// list of changed keys already (r.mu held): changed since the last saved
// cut and not held by a pending cut (an unsaved cut's keys went back to
// the list). Listed again, it would count twice in Stats.DirtyKeys and
// take the list's memory twice.
func (r *Runtime[K]) listed(gen uint64) bool {
	return gen > r.savedGen && !r.inCut(gen)
}

// MaxKeyBytes is the longest key Badger stores (its limit on a key,
// which includes the runtime's prefix).
const MaxKeyBytes = 65000

// checkKeyLen refuses a key Badger would not store: its write-behind
// flush (or a spill of the changed keys) would fail, and with it the
// whole runtime.
func (r *Runtime[K]) checkKeyLen(kb []byte) error {
	if n := len(r.cfg.prefix) + len(kb); n > MaxKeyBytes {
		return fmt.Errorf("key %s refused: %d bytes with the prefix, over Badger's %d: %w",
			streaming.QuoteKey(kb), n, MaxKeyBytes, ErrKeyTooLong)
	}
	return nil
}

func (r *Runtime[K]) keyBytes(key K) []byte {
	r.keyBuf = r.codec.AppendKey(r.keyBuf[:0], key)
	return r.keyBuf
}

// load brings key, of sketch hash h, into the cache (a miss), or into
// the spare entry when the full cache does not admit it.
func (r *Runtime[K]) load(key K, h uint64) (*entry[K], error) {
	r.stats.Misses++
	if err := r.checkKeyLen(r.keyBytes(key)); err != nil {
		return nil, err
	}
	r.pollFlush()
	e, err := r.slot(h)
	if err != nil {
		return nil, err
	}
	kb := r.keyBytes(key)
	sv, found, err := r.lookupStored(key, kb)
	if err != nil {
		return nil, err
	}
	gen := sv.gen
	if found {
		if err := e.inst.LoadDropping(sv.blob, r.dropped); err != nil {
			// Quarantine: one key's bad state must not stop the shard.
			// The key starts afresh; its next change overwrites the
			// stored state.
			e.inst.Reset()
			r.stats.Quarantined++
			if f := r.cfg.onQuarantine; f != nil {
				f(kb, err)
			}
		}
	} else {
		e.inst.Reset()
		gen = r.deleted[key]
	}
	// A new entry starts unreferenced: a key seen once leaves at the next
	// sweep, and one seen again earns its reference bit like the others.
	live := e != r.spare
	e.key, e.live, e.ref, e.changed, e.absent, e.gen, e.seen = key, live, false, false, !found, gen, sv.seen
	if live {
		r.cache[key] = e
	}
	return e, nil
}

// slot returns a free entry for the key of sketch hash h, evicting the
// coldest live one when the cache is at its capacity (or returning the
// spare entry when the key was used less lately than that one), and
// dropping entries while it is above it (the change bookkeeping grew
// since they were made).
func (r *Runtime[K]) slot(h uint64) (*entry[K], error) {
	if err := r.shrink(); err != nil {
		return nil, err
	}
	if len(r.ring) < r.capacity() {
		e := &entry[K]{inst: r.g.NewInstance()}
		r.ring = append(r.ring, e)
		return e, nil
	}
	return r.victim(h, r.sketch != nil)
}

// shrink evicts and drops entries while the cache holds more than its
// capacity (the change bookkeeping grew since they were made, or Resize
// lowered the budget).
func (r *Runtime[K]) shrink() error {
	capacity := r.capacity()
	for len(r.ring) > capacity {
		if _, err := r.victim(0, false); err != nil {
			return err
		}
		// Drop the entry: swap the last one into its place.
		i := r.hand - 1
		if i < 0 {
			i = len(r.ring) - 1
		}
		last := len(r.ring) - 1
		r.ring[i] = r.ring[last]
		r.ring[last] = nil
		r.ring = r.ring[:last]
		if r.hand > len(r.ring) {
			r.hand = 0
		}
	}
	return nil
}

// victim advances the CLOCK hand to a free entry or an unreferenced live
// one, evicts it and returns it; the hand is left just past it. With
// admit, a live one is evicted only for a key (of sketch hash h) used
// more often lately (TinyLFU: under skewed keys, a key of the long tail
// does not push out a warm one); otherwise it stays and the spare entry
// is returned.
func (r *Runtime[K]) victim(h uint64, admit bool) (*entry[K], error) {
	for {
		if r.hand >= len(r.ring) {
			r.hand = 0
		}
		e := r.ring[r.hand]
		r.hand++
		if !e.live {
			return e, nil
		}
		if e.ref {
			e.ref = false
			continue
		}
		if admit && r.sketch.estimate(h) <= r.sketch.estimate(r.sketch.hash(e.key)) {
			r.stats.NotAdmitted++
			if r.spare == nil {
				r.spare = &entry[K]{inst: r.g.NewInstance()}
			}
			return r.spare, nil
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
		if err := r.bufferState(e); err != nil {
			return fmt.Errorf("keyedstate: evict key %v: %w", e.key, err)
		}
	}
	delete(r.cache, e.key)
	e.live, e.changed = false, false
	r.stats.Evictions++
	return nil
}

// batch is a write-behind buffer: per key, where its stored value (a
// uvarint generation, then the instance's state blob) is in one
// append-only arena, or that it was deleted. Arena bytes are never
// rewritten, so a slice of it stays valid for whoever holds it.
type batch[K comparable] struct {
	idx   map[K]span
	arena []byte
	bytes int
}

type span struct {
	off, end int
	del      bool
}

// newBatch returns an empty batch of the write batch size (counted in
// the budget as the states' bytes plus batchEntryBytes a key), allocated
// up front: three quarters for the arena, the rest for the index (a
// state of some 200 bytes and up): an arena grown by appending leaves
// about its size again behind as garbage, and the garbage collector's
// work is a good part of a miss's cost.
func newBatch[K comparable](size int) *batch[K] {
	return &batch[K]{idx: make(map[K]span, size/(4*batchEntryBytes)), arena: make([]byte, 0, size*3/4)}
}

// batchEntryBytes is the bookkeeping one key of a batch is counted at.
const batchEntryBytes = 64

func (b *batch[K]) get(key K) (val []byte, deleted, ok bool) {
	s, ok := b.idx[key]
	if !ok {
		return nil, false, false
	}
	return b.arena[s.off:s.end], s.del, true
}

func (b *batch[K]) put(key K, s span) {
	if _, had := b.idx[key]; !had {
		b.bytes += batchEntryBytes
	}
	b.idx[key] = s
}

// bufferState writes e's state, stamped with its generation and when it
// was last seen, behind.
func (r *Runtime[K]) bufferState(e *entry[K]) error {
	b := r.pending
	off := len(b.arena)
	b.arena = appendHeader(b.arena, e.gen, e.seen)
	var err error
	if b.arena, err = e.inst.AppendSave(b.arena); err != nil {
		b.arena = b.arena[:off]
		return err
	}
	b.bytes += len(b.arena) - off
	b.put(e.key, span{off: off, end: len(b.arena)})
	r.maybeFlush()
	return nil
}

// bufferDelete writes key's deletion behind.
func (r *Runtime[K]) bufferDelete(key K) {
	r.pending.put(key, span{off: len(r.pending.arena), end: len(r.pending.arena), del: true})
	r.maybeFlush()
}

func (r *Runtime[K]) maybeFlush() {
	if r.pending.bytes >= r.cfg.writeBatchBytes {
		r.startFlush()
	}
}

// startFlush hands the buffer to the flusher, first waiting for the batch
// before it (at most one batch in flight: back-pressure, not a queue).
func (r *Runtime[K]) startFlush() {
	if len(r.pending.idx) == 0 {
		return
	}
	if r.flushing != nil {
		r.stats.FlushWaits++
		r.finishFlush(<-r.flushDone)
	}
	r.flushing = r.pending
	r.pending = newBatch[K](r.cfg.writeBatchBytes)
	r.stats.Flushes++
	r.flushCh <- r.flushing
}

// finishFlush ends the flush in flight. The hot path's read transaction
// began before the batch was written, so it is dropped: the next lookup
// opens one that sees the batch in Badger.
func (r *Runtime[K]) finishFlush(err error) {
	r.flushing = nil
	r.dropReadTxn()
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("keyedstate: write-behind flush: %w", err)
	}
}

func (r *Runtime[K]) dropReadTxn() {
	if r.rview != nil {
		r.rview.close()
		r.rview = nil
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
// Close). After every half value-log file it wrote, it collects the value
// log's garbage: states overwritten since (see valueLogGC). A failed GC is
// counted in Stats (ValueLogGCErrors), not reported as the flush's error:
// the batch was written, and a sticky flush error would stop the runtime.
func (r *Runtime[K]) flushLoop() {
	defer close(r.loopDone)
	var written int64
	gcEvery := r.db.Opts().ValueLogFileSize / 2
	for b := range r.flushCh {
		r.gate.RLock()
		err := r.writeBatch(b)
		written += int64(len(b.arena))
		if err == nil && written >= gcEvery && !r.db.Opts().InMemory {
			written = 0
			if gcErr := valueLogGC(r.db); gcErr != nil {
				r.gcMu.Lock()
				r.gcErrs++
				r.gcLastErr = fmt.Errorf("keyedstate: runtime of prefix %q: %w", r.cfg.prefix, gcErr)
				r.gcMu.Unlock()
			}
		}
		r.gate.RUnlock()
		r.flushDone <- err
	}
}

// runValueLogGC is Badger's value-log GC (a variable: tests make it fail).
var runValueLogGC = (*badger.DB).RunValueLogGC

// valueLogGC rewrites the value-log files that are at least half garbage
// (states overwritten since they were written), a few at most per call.
// Another GC running on the DB (a runtime sharing it) is not an error.
func valueLogGC(db *badger.DB) error {
	for range 4 {
		switch err := runValueLogGC(db, 0.5); {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			return nil
		case err != nil:
			return fmt.Errorf("value log GC: %w", err)
		}
	}
	return nil
}

func (r *Runtime[K]) writeBatch(b *batch[K]) error {
	wb := r.db.NewWriteBatch()
	defer wb.Cancel()
	// Badger holds the key and value slices until the batch is flushed:
	// keys go into an arena that is only ever appended to.
	keys := make([]byte, 0, len(b.idx)*(len(r.cfg.prefix)+16))
	for k, s := range b.idx {
		start := len(keys)
		keys = append(keys, r.cfg.prefix...)
		keys = r.codec.AppendKey(keys, k)
		key := keys[start:len(keys):len(keys)]
		var err error
		if s.del {
			err = wb.Delete(key)
		} else {
			err = wb.Set(key, b.arena[s.off:s.end:s.end])
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

// storedVal is a stored value: the instance's state (Instance.Save's
// blob) and its header.
type storedVal struct {
	blob []byte
	gen  uint64 // generation of the key's last change
	seen int64  // unix seconds of its last record, or of the restore (WithKeyTTL)
}

// lookupStored finds a key's stored state: write-behind buffer, the batch
// in flight, then Badger, and the generation it was written in. The
// returned slice is valid until the next lookup.
func (r *Runtime[K]) lookupStored(key K, kb []byte) (sv storedVal, found bool, err error) {
	if r.err != nil {
		// A failed flush dropped the states it held: Badger lacks them,
		// and the key would read as older or absent. The sticky error
		// also stops the rest of the Process call that noticed it.
		return storedVal{}, false, fmt.Errorf("keyedstate: read key %s: %w", streaming.QuoteKey(kb), r.err)
	}
	val, deleted, ok := r.pending.get(key)
	if !ok && r.flushing != nil {
		val, deleted, ok = r.flushing.get(key)
	}
	if !ok {
		if r.rview == nil {
			v := openReadView(r.db)
			r.rview = &v
		}
		item, gerr := r.rview.txn.Get(r.fullKey(kb))
		if errors.Is(gerr, badger.ErrKeyNotFound) {
			return storedVal{}, false, nil
		}
		if gerr == nil {
			r.valBuf, gerr = item.ValueCopy(r.valBuf[:0])
		}
		if gerr != nil {
			return storedVal{}, false, fmt.Errorf("keyedstate: read key %s: %w", streaming.QuoteKey(kb), gerr)
		}
		val = r.valBuf
	} else if deleted {
		return storedVal{}, false, nil
	}
	sv, err = splitStored(val)
	if err != nil {
		return storedVal{}, false, fmt.Errorf("keyedstate: stored state of key %s: %w", streaming.QuoteKey(kb), err)
	}
	return sv, true, nil
}

// appendHeader appends a stored value's header: the generation of the
// key's last change and when it was last seen (unix seconds, 0 when keys
// do not expire), two uvarints.
func appendHeader(b []byte, gen uint64, seen int64) []byte {
	b = binary.AppendUvarint(b, gen)
	return binary.AppendUvarint(b, uint64(max(seen, 0)))
}

// splitStored splits a stored value into its header and the instance's
// state.
func splitStored(val []byte) (storedVal, error) {
	gen, n := binary.Uvarint(val)
	if n <= 0 {
		return storedVal{}, fmt.Errorf("stored value of %d bytes has no generation header: %w", len(val), streaming.ErrCorrupt)
	}
	seen, m := binary.Uvarint(val[n:])
	if m <= 0 || seen > math.MaxInt64 {
		return storedVal{}, fmt.Errorf("stored value of %d bytes has no last-seen header: %w", len(val), streaming.ErrCorrupt)
	}
	return storedVal{blob: val[n+m:], gen: gen, seen: int64(seen)}, nil
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
	r.dropReadTxn()
	r.closed = true
	close(r.flushCh)
	err := r.err
	r.mu.Unlock()
	<-r.loopDone
	releaseGate(r.db)
	return err
}

// Stats returns the runtime's counters.
func (r *Runtime[K]) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Cached = len(r.cache)
	s.Capacity = r.capacity()
	s.EntryBytes = r.entrySz
	s.PendingBytes = r.pending.bytes
	s.DirtyKeys = r.dirty.keys()
	s.Keys = r.keys
	if r.cut != nil {
		s.CutPending = true
		s.CapturedKeys = len(r.cut.captured)
	}
	s.Budget = r.cfg.budget
	s.GCHeadroom = r.cfg.budget - int64(float64(r.cfg.budget)*(1-r.cfg.gcHeadroom))
	s.BadgerBytes = r.dbBytes
	s.CacheBytes = int64(len(r.ring)) * int64(r.entrySz)
	s.SketchBytes = r.sketchBytes()
	s.BatchBytes = int64(2 * r.cfg.writeBatchBytes)
	if r.sketch != nil {
		s.SamplePeriod = r.sketch.period
	}
	s.ChangedBytes = r.changedBytes()
	r.gcMu.Lock()
	s.ValueLogGCErrors, s.ValueLogGCError = r.gcErrs, r.gcLastErr
	r.gcMu.Unlock()
	return s
}

// Get returns a copy of key's saved state (Instance.Save's blob) wherever
// it lives, and false for a key never seen or deleted. For tests and
// tools; it does not load the key into the cache.
func (r *Runtime[K]) Get(key K) ([]byte, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return nil, false, err
	}
	if e, ok := r.cache[key]; ok {
		b, err := e.inst.AppendSave(make([]byte, 0, 64))
		if err != nil {
			return nil, false, fmt.Errorf("keyedstate: save key %s: %w", streaming.QuoteKey(r.keyBytes(key)), err)
		}
		return b, true, nil
	}
	sv, found, err := r.lookupStored(key, r.keyBytes(key))
	if err != nil || !found {
		return nil, false, err
	}
	return append([]byte(nil), sv.blob...), true, nil
}
