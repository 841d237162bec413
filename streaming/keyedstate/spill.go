package keyedstate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// A list of changed keys that outgrows its part of the budget (many keys
// changed while checkpoints fail, say) is spilled to Badger as a sorted
// run: its distinct keys, in chunks of at most runChunkBytes (an
// in-memory database sized from a small budget takes no larger value;
// see BadgerOptions), under
// runsPrefix + the runtime's prefix + run id (8 bytes) + chunk (4 bytes).
// Saving a cut merges its in-memory keys with its runs; releasing it saved
// deletes the runs; Restore drops them all; a spill that fails deletes
// the chunks it wrote.
const runChunkBytes = 64 << 10

// runsPrefix starts the Badger keys of spilled runs. It is outside every
// runtime's state prefix: New refuses an empty one or one starting with
// 0xff.
var runsPrefix = []byte("\xffkeyedstate-changed/")

// spilledRun is a sorted run of distinct changed keys in Badger.
type spilledRun struct {
	id     uint64
	chunks int
	keys   int
}

// spillAt is the in-memory size at which the list of changed keys is
// spilled: an eighth of what the budget leaves for the cache and the
// change bookkeeping.
func (r *Runtime[K]) spillAt() int { return int(max(r.avail/8, 4<<10)) }

// maybeSpill spills the list of changed keys when it is too large (r.mu
// held).
func (r *Runtime[K]) maybeSpill() error {
	if r.dirty.memBytes() < r.spillAt() {
		return nil
	}
	return r.spill()
}

func (r *Runtime[K]) runsKeyPrefix() []byte { return runsKeyPrefix(r.cfg.prefix) }

// runsKeyPrefix starts the keys of the spilled runs of the runtime of
// state prefix prefix.
func runsKeyPrefix(prefix []byte) []byte {
	return append(append([]byte(nil), runsPrefix...), prefix...)
}

func (r *Runtime[K]) runKey(id uint64, chunk int) []byte {
	k := r.runsKeyPrefix()
	k = binary.BigEndian.AppendUint64(k, id)
	return binary.BigEndian.AppendUint32(k, uint32(chunk))
}

// spill writes the in-memory part of the list of changed keys to Badger
// as one sorted run and empties it (r.mu held). It writes synchronously:
// the hot path waits for it, once per spillAt bytes of changed keys.
func (r *Runtime[K]) spill() error {
	refs := r.dirty.sorted()
	if len(refs) == 0 {
		return nil
	}
	r.nextRun++
	run := spilledRun{id: r.nextRun, keys: len(refs)}
	wb := r.db.NewWriteBatch()
	defer wb.Cancel()
	var chunk []byte
	put := func() error {
		err := wb.Set(r.runKey(run.id, run.chunks), chunk)
		run.chunks++
		chunk = nil
		return err
	}
	for _, ref := range refs {
		kb := r.dirty.at(ref)
		if len(chunk) > 0 && len(chunk)+binary.MaxVarintLen64+len(kb) > runChunkBytes {
			if err := put(); err != nil {
				return r.failedSpill(wb, run, err)
			}
		}
		chunk = binary.AppendUvarint(chunk, uint64(len(kb)))
		chunk = append(chunk, kb...)
	}
	if len(chunk) > 0 {
		if err := put(); err != nil {
			return r.failedSpill(wb, run, err)
		}
	}
	if err := wb.Flush(); err != nil {
		return r.failedSpill(wb, run, err)
	}
	runs := append(r.dirty.runs, run)
	r.dirty = keyList{runs: runs, repeats: r.dirty.repeats}
	r.stats.Spills++
	return nil
}

// failedSpill ends spill's write batch wb, which failed with err, and
// deletes the chunks of run it may have written (a write batch commits
// as it grows): nothing refers to the run. Best effort: chunks whose
// deletion fails too (the write error goes on) stay until a Restore or
// DeleteState drops all runs.
func (r *Runtime[K]) failedSpill(wb *badger.WriteBatch, run spilledRun, err error) error {
	wb.Cancel() // waits for the commits under way
	_ = r.dropRuns([]spilledRun{run})
	return fmt.Errorf("keyedstate: spill changed keys: %w", err)
}

// dropRuns deletes spilled runs from Badger.
func (r *Runtime[K]) dropRuns(runs []spilledRun) error {
	if len(runs) == 0 {
		return nil
	}
	wb := r.db.NewWriteBatch()
	defer wb.Cancel()
	for _, run := range runs {
		for c := range run.chunks {
			if err := wb.Delete(r.runKey(run.id, c)); err != nil {
				return err
			}
		}
	}
	return wb.Flush()
}

// runCursor reads a spilled run back, one chunk at a time.
type runCursor struct {
	r interface {
		chunk(id uint64, i int) ([]byte, error)
	}
	run   spilledRun
	next  int    // next chunk to read
	buf   []byte // current chunk
	off   int
	cur   []byte // current key (aliases buf)
	valid bool
}

func (c *runCursor) advance() error {
	for c.off >= len(c.buf) {
		if c.next >= c.run.chunks {
			c.valid = false
			return nil
		}
		b, err := c.r.chunk(c.run.id, c.next)
		if err != nil {
			return err
		}
		c.buf, c.off = b, 0
		c.next++
	}
	n, w := binary.Uvarint(c.buf[c.off:])
	if w <= 0 || uint64(len(c.buf)-c.off-w) < n {
		return fmt.Errorf("keyedstate: spilled run %d chunk %d is corrupt", c.run.id, c.next-1)
	}
	c.cur = c.buf[c.off+w : c.off+w+int(n)]
	c.off += w + int(n)
	c.valid = true
	return nil
}

// chunk reads chunk i of run id from Badger (a copy). It reads through
// a read view: a chunk is longer than BadgerOptions' value threshold, so
// in the value log, and a value-log GC (a flusher's, or another
// runtime's on the DB) that moved it between the Get and the copy would
// otherwise delete its file under the read.
func (r *Runtime[K]) chunk(id uint64, i int) ([]byte, error) {
	v := openReadView(r.db)
	defer v.close()
	item, err := v.txn.Get(r.runKey(id, i))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("keyedstate: spilled run %d has lost chunk %d", id, i)
	}
	if err == nil {
		var out []byte
		if out, err = item.ValueCopy(nil); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("keyedstate: read chunk %d of spilled run %d: %w", i, id, err)
}

// keySource yields a cut's distinct changed keys in byte order: the
// in-memory list (sorted once) merged with the spilled runs. The key it
// returns is valid until the next call.
type keySource struct {
	mem  *keyList
	refs []keyRef
	i    int
	runs []*runCursor
	last []byte
	has  bool
}

func newKeySource[K comparable](r *Runtime[K], mem *keyList, refs []keyRef) (*keySource, error) {
	s := &keySource{mem: mem, refs: refs}
	for _, run := range mem.runs {
		c := &runCursor{r: r, run: run}
		if err := c.advance(); err != nil {
			return nil, err
		}
		s.runs = append(s.runs, c)
	}
	return s, nil
}

// next returns the next distinct key, or false at the end.
func (s *keySource) next() ([]byte, bool, error) {
	for {
		var best []byte
		from := -2 // -1: the in-memory list, i ≥ 0: run i
		if s.i < len(s.refs) {
			best, from = s.mem.at(s.refs[s.i]), -1
		}
		for i, c := range s.runs {
			if c.valid && (from == -2 || bytes.Compare(c.cur, best) < 0) {
				best, from = c.cur, i
			}
		}
		if from == -2 {
			return nil, false, nil
		}
		dup := s.has && bytes.Equal(best, s.last)
		s.last = append(s.last[:0], best...)
		s.has = true
		if from == -1 {
			s.i++
		} else if err := s.runs[from].advance(); err != nil {
			return nil, false, err
		}
		if !dup {
			return s.last, true, nil
		}
	}
}
