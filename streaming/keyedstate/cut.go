package keyedstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/tflo-io/tflo/streaming"
)

// cut is a pending consistent cut: the keys changed in generations
// (savedGen, gen] and the cursor of the last record before it.
type cut[K comparable] struct {
	r        *Runtime[K]
	gen      uint64
	keys     keyList      // immutable after the cut
	captured map[K][]byte // copy-on-write states as stored values (appendHeader, then the state; nil: absent at the cut); guarded by r.mu
	capBytes int          // memory of captured; guarded by r.mu
	ctype    string
	cur      []byte
	released bool // guarded by r.mu
	relisted int  // its keys listed again since (changed during the save); guarded by r.mu

	sorted    []keyRef // distinct keys in byte order, built by the first Pieces call
	sortBytes int      // memory of sorted; guarded by r.mu
}

// capturedEntryBytes is the bookkeeping one captured state is counted at.
const capturedEntryBytes = 64

// bytes is the memory the cut holds (r.mu held).
func (c *cut[K]) bytes() int { return c.keys.bytes() + c.capBytes + c.sortBytes }

// Cut marks a consistent cut between two Process calls; see the package
// doc. It costs O(1): the list of changed keys moves to the cut. It fails
// with ErrCutPending while an earlier cut is unreleased.
func (r *Runtime[K]) Cut(ctx context.Context) (streaming.Cut, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return nil, err
	}
	if r.cut != nil {
		return nil, ErrCutPending
	}
	start := time.Now()
	c := &cut[K]{
		r: r, gen: r.gen, keys: r.dirty, captured: make(map[K][]byte),
		ctype: r.ctype, cur: append([]byte(nil), r.cur...),
	}
	r.dirty = keyList{}
	r.gen++
	r.cut = c
	r.stats.LastCutStall = time.Since(start)
	return c, nil
}

// capture saves e's state aside for the cut (r.mu held).
func (c *cut[K]) capture(e *entry[K]) error {
	if e.absent {
		c.keep(e.key, nil)
		return nil
	}
	val, err := e.inst.AppendSave(appendHeader(nil, 0, e.seen))
	if err != nil {
		return fmt.Errorf("keyedstate: copy-on-write of key %v: %w", e.key, err)
	}
	c.keep(e.key, val)
	return nil
}

// keep records key's stored value as of the cut (nil: absent) (r.mu
// held). A key kept already keeps its first value, counted once: a change
// that failed after keeping it (its list of changed keys did not spill)
// left the key as it was, and the retry keeps it again.
func (c *cut[K]) keep(key K, blob []byte) {
	if _, ok := c.captured[key]; ok {
		return
	}
	c.captured[key] = blob
	c.capBytes += len(blob) + capturedEntryBytes
}

func (c *cut[K]) Cursor() (string, []byte) { return c.ctype, c.cur }

// Release ends the cut. A saved cut's generations become the saved ones;
// an unsaved cut's keys join the current list of changed keys, so the
// next cut carries them.
func (c *cut[K]) Release(saved bool) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.released {
		return
	}
	c.released = true
	if r.cut == c {
		r.cut = nil
	}
	if saved {
		r.savedGen = c.gen
		for k, g := range r.deleted {
			if g <= c.gen {
				delete(r.deleted, k)
			}
		}
		// Its spilled runs are garbage now; one that fails to go is
		// retried at the next release (Restore drops them all anyway).
		runs := append(r.oldRuns, c.keys.runs...)
		r.oldRuns = nil
		if err := r.dropRuns(runs); err != nil {
			r.oldRuns = runs
		}
	} else {
		// The cut's keys changed since were captured (copy-on-write)
		// and listed again: they go back once, with the cut's keys. One
		// listed again in a run spilled since stays there, a repeat.
		var skip func(kb []byte) bool
		skipped := 0
		if len(c.captured) > 0 {
			again := make(map[string]struct{}, len(c.captured))
			for k := range c.captured {
				again[string(r.codec.AppendKey(nil, k))] = struct{}{}
			}
			skip = func(kb []byte) bool {
				_, ok := again[string(kb)]
				if ok {
					skipped++
				}
				return ok
			}
		}
		var l keyList
		l.addAll(&c.keys, nil)
		l.addAll(&r.dirty, skip)
		l.repeats += c.relisted - skipped
		r.dirty = l
	}
	c.captured, c.capBytes, c.sorted, c.sortBytes = nil, 0, nil, 0
}

// chunkVal is where a key's state as of the cut was found.
type chunkVal struct {
	src      int // srcArena, srcRef, srcStored, srcBadger, srcTomb
	off, end int
	ref      []byte
	seen     int64 // srcArena: when the key was last seen
}

const (
	srcArena  = iota // serialized from the cache into the chunk's arena
	srcRef           // a copy-on-write state, as a stored value
	srcStored        // a write-behind value (generation header first)
	srcBadger        // to read from Badger
	srcTomb          // absent at the cut
)

// Pieces emits the cut's keys with their states as of the cut, in key
// byte order, as pieces of about the configured size. The first call
// sorts the cut's keys (O(n log n) in the changed keys, outside the
// lock). The runtime's lock is held only while one chunk of keys is
// located (and cached ones are serialized); Badger reads go through a
// read transaction opened under the lock.
func (c *cut[K]) Pieces(ctx context.Context, emit func([]byte) error) error {
	r := c.r
	r.mu.Lock()
	sorted := c.sorted
	r.mu.Unlock()
	if sorted == nil {
		sorted = c.keys.sorted()
		r.mu.Lock()
		c.sorted, c.sortBytes = sorted, 8*cap(sorted)
		r.mu.Unlock()
	}
	src, err := newKeySource(r, &c.keys, sorted)
	if err != nil {
		return fmt.Errorf("keyedstate: save cut: %w", err)
	}
	w := pieceWriter{limit: r.cfg.pieceBytes}
	vals := make([]chunkVal, 0, r.cfg.chunkKeys)
	keys := make([]K, 0, r.cfg.chunkKeys)
	kbEnds := make([]int, 0, r.cfg.chunkKeys)
	var arena, fk, kbArena []byte
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The next chunk of keys, in order.
		keys, kbEnds, kbArena = keys[:0], kbEnds[:0], kbArena[:0]
		for len(keys) < r.cfg.chunkKeys {
			kb, ok, err := src.next()
			if err != nil {
				return fmt.Errorf("keyedstate: save cut: %w", err)
			}
			if !ok {
				break
			}
			k, err := r.codec.DecodeKey(kb)
			if err != nil {
				return fmt.Errorf("keyedstate: save cut: %w", err)
			}
			keys = append(keys, k)
			kbArena = append(kbArena, kb...)
			kbEnds = append(kbEnds, len(kbArena))
		}
		if len(keys) == 0 {
			break
		}
		kbOf := func(j int) []byte {
			start := 0
			if j > 0 {
				start = kbEnds[j-1]
			}
			return kbArena[start:kbEnds[j]]
		}
		vals = vals[:0]
		arena = arena[:0]
		var view *readView
		r.mu.Lock()
		held := time.Now()
		if c.released {
			r.mu.Unlock()
			return errors.New("keyedstate: cut released before its pieces were written")
		}
		if r.err != nil {
			// A failed flush dropped states of the cut that Badger lacks.
			err := r.err
			r.mu.Unlock()
			return fmt.Errorf("keyedstate: save cut: %w", err)
		}
		var err error
		for j, k := range keys {
			if b, ok := c.captured[k]; ok {
				vals = append(vals, refOrTomb(b))
				continue
			}
			if e, ok := r.cache[k]; ok {
				if e.absent {
					vals = append(vals, chunkVal{src: srcTomb})
					continue
				}
				off := len(arena)
				if arena, err = e.inst.AppendSave(arena); err != nil {
					// Name the key: it is the one to find (or delete).
					err = fmt.Errorf("key %s: %w", streaming.QuoteKey(kbOf(j)), err)
					break
				}
				vals = append(vals, chunkVal{src: srcArena, off: off, end: len(arena), seen: e.seen})
				continue
			}
			if v, ok := c.stored(k); ok {
				vals = append(vals, v)
				continue
			}
			if view == nil {
				v := openReadView(r.db)
				view = &v
			}
			vals = append(vals, chunkVal{src: srcBadger})
		}
		if d := time.Since(held); d > r.stats.SaveHoldMax {
			r.stats.SaveHoldMax = d
		}
		r.mu.Unlock()
		if err != nil {
			if view != nil {
				view.close()
			}
			return fmt.Errorf("keyedstate: save cut: %w", err)
		}
		for j := range keys {
			kb := kbOf(j)
			v := vals[j]
			switch v.src {
			case srcArena:
				err = w.add(kb, arena[v.off:v.end], v.seen, false)
			case srcRef:
				err = addStored(&w, kb, v.ref)
			case srcTomb:
				err = w.add(kb, nil, 0, true)
			case srcStored:
				err = addStored(&w, kb, v.ref)
			case srcBadger:
				fk = append(append(fk[:0], r.cfg.prefix...), kb...)
				item, gerr := view.txn.Get(fk)
				switch {
				case errors.Is(gerr, badger.ErrKeyNotFound):
					err = w.add(kb, nil, 0, true)
				case gerr != nil:
					err = fmt.Errorf("keyedstate: read key %q at the cut: %w", kb, gerr)
				default:
					err = item.Value(func(val []byte) error { return addStored(&w, kb, val) })
				}
			}
			if err == nil && w.full() {
				err = emit(w.finish())
			}
			if err != nil {
				break
			}
		}
		if view != nil {
			view.close()
		}
		if err != nil {
			return err
		}
	}
	if last := w.finish(); last != nil {
		return emit(last)
	}
	return nil
}

// stored finds k in the write-behind buffer or the batch in flight
// (r.mu held).
func (c *cut[K]) stored(k K) (chunkVal, bool) {
	r := c.r
	val, deleted, ok := r.pending.get(k)
	if !ok && r.flushing != nil {
		val, deleted, ok = r.flushing.get(k)
	}
	switch {
	case !ok:
		return chunkVal{}, false
	case deleted:
		return chunkVal{src: srcTomb}, true
	}
	return chunkVal{src: srcStored, ref: val}, true
}

// addStored adds a stored value (generation header, then the state).
func addStored(w *pieceWriter, kb, val []byte) error {
	sv, err := splitStored(val)
	if err != nil {
		return fmt.Errorf("keyedstate: stored state of key %s: %w", streaming.QuoteKey(kb), err)
	}
	return w.add(kb, sv.blob, sv.seen, false)
}

func refOrTomb(b []byte) chunkVal {
	if b == nil {
		return chunkVal{src: srcTomb}
	}
	return chunkVal{src: srcRef, ref: b}
}

// Restore replaces all state with the pieces (later entries win) and sets
// the cursor: the cache and write-behind buffer are dropped, the runtime's
// Badger prefix is dropped and rewritten with one WriteBatch. A restore
// of more than a memtable then compacts the DB into one level (Badger's
// Flatten; see compact.go), the other runtimes on the DB pausing their
// writes meanwhile. Call it with the hot path stopped. A failed restore
// leaves the runtime refusing everything but another Restore.
func (r *Runtime[K]) Restore(ctx context.Context, cursorType string, cursor []byte, pieces iter.Seq2[[]byte, error]) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.flushing != nil {
		<-r.flushDone
		r.flushing = nil
	}
	r.dropReadTxn()
	if r.cut != nil {
		r.cut.released = true
		r.cut = nil
	}
	clear(r.cache)
	r.ring, r.hand = nil, 0
	r.pending = newBatch[K](r.cfg.writeBatchBytes)
	r.dirty = keyList{}
	clear(r.deleted)
	r.gen++
	r.savedGen = r.gen - 1 // restored state is checkpointed; it is stored with generation 0
	r.err = nil
	r.stats.RestoredItems, r.stats.RestoreCompaction = 0, 0
	r.oldRuns = nil
	r.keys = 0
	defer func() {
		if err != nil {
			// The old state is gone and the new one incomplete: nothing
			// may read, write or checkpoint it until a restore succeeds.
			r.err = fmt.Errorf("keyedstate: failed restore left the state incomplete (restore again): %w", err)
		}
	}()
	written, err := r.writeRestore(ctx, pieces)
	if err != nil {
		return err
	}
	r.stats.RestoreCompaction, err = r.compactAfterRestore(written)
	if err != nil {
		return fmt.Errorf("keyedstate: restore: compact the state database: %w", err)
	}
	n, err := countPrefix(r.db, r.cfg.prefix)
	if err != nil {
		return fmt.Errorf("keyedstate: restore: count keys: %w", err)
	}
	r.keys = n
	r.ctype = cursorType
	r.cur = append(r.cur[:0], cursor...)
	return nil
}

// DropNodes names the nodes whose state the keys may still hold but which
// must never load (streaming.NodeDropper; a snapshot's
// SnapshotMeta.DroppedNodes): from now on a key's state loads without
// them (Instance.LoadDropping), its other nodes restored; the next change
// of the key saves it without them. nil loads every node's state. The
// checkpointer calls it before Restore, with the hot path stopped.
func (r *Runtime[K]) DropNodes(nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped = slices.Clone(nodes)
}

// writeRestore clears the runtime's prefixes and writes the pieces, with
// the DB's gate's read side held; it returns the bytes written.
func (r *Runtime[K]) writeRestore(ctx context.Context, pieces iter.Seq2[[]byte, error]) (written int64, err error) {
	r.gate.RLock()
	defer r.gate.RUnlock()
	var seen int64 // for keys whose piece has no last-seen time (WithKeyTTL)
	if r.cfg.keyTTL > 0 {
		seen = r.cfg.now().Unix()
	}
	for _, prefix := range [][]byte{r.cfg.prefix, r.runsKeyPrefix()} {
		if err := deletePrefix(ctx, r.db, prefix); err != nil {
			return 0, fmt.Errorf("keyedstate: restore: clear prefix %q: %w", prefix, err)
		}
	}
	wb := r.db.NewWriteBatch()
	defer wb.Cancel()
	for p, err := range pieces {
		if err != nil {
			return 0, fmt.Errorf("keyedstate: restore: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		entries, err := decodePiece(p)
		if err != nil {
			return 0, fmt.Errorf("keyedstate: restore: %w", err)
		}
		arena := make([]byte, 0, len(p)+len(entries)*(len(r.cfg.prefix)+1))
		for _, e := range entries {
			// Badger holds key and value until the batch commits: one
			// arena per piece, only ever appended to.
			start := len(arena)
			arena = append(append(arena, r.cfg.prefix...), e.Key...)
			key := arena[start:len(arena):len(arena)]
			if e.Tombstone {
				err = wb.Delete(key)
			} else {
				start = len(arena)
				// Generation 0: restored. A key whose last sighting the
				// piece does not carry counts as seen now.
				at := e.Seen
				if at == 0 {
					at = seen
				}
				arena = append(appendHeader(arena, 0, at), e.State...)
				err = wb.Set(key, arena[start:len(arena):len(arena)])
			}
			if err != nil {
				return 0, fmt.Errorf("keyedstate: restore key %q: %w", e.Key, err)
			}
			r.stats.RestoredItems++
		}
		written += int64(len(arena))
	}
	if err := wb.Flush(); err != nil {
		return 0, fmt.Errorf("keyedstate: restore: %w", err)
	}
	return written, nil
}

// Cursor returns the cursor of the last record applied (after a Restore:
// the restored one). The slice is a copy.
func (r *Runtime[K]) Cursor() (string, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctype, append([]byte(nil), r.cur...)
}

// runHead walks one run's entries during a merge.
type runHead struct {
	next    func() ([]byte, error, bool)
	stop    func()
	entries []pieceEntry
	i       int
	done    bool
}

func (h *runHead) advance() error {
	h.i++
	for h.i >= len(h.entries) {
		data, err, ok := h.next()
		if !ok {
			h.done = true
			return nil
		}
		if err != nil {
			return err
		}
		if h.entries, err = decodePiece(data); err != nil {
			return err
		}
		h.i = 0
	}
	return nil
}

// MergeRuns merges sorted runs (oldest first) into one: for each key the
// newest run's entry wins, and tombstones are dropped since the result is
// the whole state. It holds one piece per run in memory and does not touch
// the runtime's state.
func (r *Runtime[K]) MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	heads := make([]*runHead, len(runs))
	for i, run := range runs {
		next, stop := iter.Pull2(run)
		defer stop()
		heads[i] = &runHead{next: next, stop: stop, i: -1}
		if err := heads[i].advance(); err != nil {
			return fmt.Errorf("keyedstate: merge run %d: %w", i, err)
		}
	}
	w := pieceWriter{limit: r.cfg.pieceBytes}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		win := -1
		for i, h := range heads {
			if h.done {
				continue
			}
			// Newer runs (higher i) win ties.
			if win < 0 || bytes.Compare(h.entries[h.i].Key, heads[win].entries[heads[win].i].Key) <= 0 {
				win = i
			}
		}
		if win < 0 {
			break
		}
		e := heads[win].entries[heads[win].i]
		if !e.Tombstone {
			if err := w.add(e.Key, e.State, e.Seen, false); err != nil {
				return err
			}
			if w.full() {
				if err := emit(w.finish()); err != nil {
					return err
				}
			}
		}
		key := e.Key
		for i, h := range heads {
			if !h.done && bytes.Equal(h.entries[h.i].Key, key) {
				if err := h.advance(); err != nil {
					return fmt.Errorf("keyedstate: merge run %d: %w", i, err)
				}
			}
		}
	}
	if last := w.finish(); last != nil {
		return emit(last)
	}
	return nil
}

// countPrefix counts the keys under prefix (keys only: the LSM tree, not
// the value log).
func countPrefix(db *badger.DB, prefix []byte) (int, error) {
	n := 0
	err := db.View(func(txn *badger.Txn) error {
		eachKey(txn, prefix, func([]byte) bool { n++; return true })
		return nil
	})
	return n, err
}

// eachKey calls fn with every key under prefix in order (keys only; the
// slice is valid during the call) until fn returns false.
func eachKey(txn *badger.Txn, prefix []byte, fn func(key []byte) bool) {
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Prefix = prefix
	it := txn.NewIterator(opts)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix) && fn(it.Item().Key()); it.Next() {
	}
}

// DeleteState deletes the state a runtime opened WithPrefix(prefix) kept
// in db (every key under prefix, and the lists of changed keys it
// spilled, under the spilled runs' prefix then prefix), with write
// batches, so the runtimes of
// other shards sharing db write on meanwhile. The runtime must be closed,
// and no other opened on prefix until DeleteState returns: a worker calls
// it for a shard it gave up, whose keys would otherwise stay in its
// database (in memory, without a state folder) until it held the shard
// again. A prefix that is empty or starts with 0xff is refused, as New
// refuses it.
func DeleteState(ctx context.Context, db *badger.DB, prefix []byte) error {
	if len(prefix) == 0 || prefix[0] == 0xff {
		return fmt.Errorf("keyed state: delete the state under prefix %q: not a runtime's prefix (empty, or under the spilled lists of changed keys)", prefix)
	}
	// The spilled runs too: a runtime closed while its checkpoints
	// failed leaves them, and only a Restore on prefix would drop them.
	for _, p := range [][]byte{prefix, runsKeyPrefix(prefix)} {
		if err := deletePrefix(ctx, db, p); err != nil {
			return fmt.Errorf("keyed state: delete the state under prefix %q: %w", p, err)
		}
	}
	return nil
}

// deletePrefix deletes every key under prefix with write batches of
// deletions. Not Badger's DropPrefix: that blocks every write to the DB
// while it runs, and the runtimes of other shards sharing the DB would
// see their write-behind flushes fail.
func deletePrefix(ctx context.Context, db *badger.DB, prefix []byte) error {
	const batch = 10000
	for {
		var keys [][]byte
		err := db.View(func(txn *badger.Txn) error {
			eachKey(txn, prefix, func(k []byte) bool {
				keys = append(keys, append([]byte(nil), k...))
				return len(keys) < batch
			})
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		wb := db.NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return err
			}
		}
		if err := wb.Flush(); err != nil {
			return err
		}
	}
}
