package keyedstate

import (
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BadgerShare: BadgerOptions sizes Badger's memtables at a BadgerShare-th
// of the budget (three memtables an eighth of that each).
const BadgerShare = 4

// pooledBuilders is how many table builders' buffers (two base table
// sizes each) Badger keeps pooled between compactions.
const pooledBuilders = 8

// BadgerOptions returns Badger options for the state database at dir
// (dir "" and WithInMemory(true) for tests, which keeps every state in
// the LSM tree as an in-memory DB has no value log) sized from a memory budget
// of budget bytes: Badger's memtables and the buffers it pools for
// compactions (BadgerBytes) take 3/32 of the budget plus 32 MiB (about a
// fifth of 256 MiB, an eighth of 1 GiB), and at least 35 MiB, and New,
// given the same budget with WithMemoryBudget,
// reads them back from the DB and keeps the rest for the runtime.
//
// Badger is tuned for the runtime's point reads and batch writes of
// small states that are overwritten all the time: the states go to the
// value log and the LSM tree holds only keys and pointers, so compactions
// rewrite a fraction of the bytes (the runtime collects the value log's
// garbage as it writes: keeping the states of BenchmarkPerEvent, ~100
// bytes, in the tree instead doubled its time per event under uniform
// keys at 10M keys, 42 µs against 20.5 µs, writing 2,427 bytes to disk
// per event against 476, though a read no longer goes to the value
// log; measured again on the level sizes below: 33.1 µs against 21.5,
// 1,530 bytes against 323; under Zipf keys, where a record writes a
// tenth as much, it was slower too: 4,898 ns against 3,638 in the same
// hour, 197 bytes written per event against 48); level 0 compacted into the base level five tables at a time,
// Badger's default (BenchmarkPerEvent in steady state at 10M keys, two
// runs of 4M events each: ten at a time took Zipf keys 25% more time per
// event, 4.2-4.7 µs against 3.2-3.3, and wrote twice the bytes to disk,
// for 2-4% less under uniform keys, 20.7 µs against 21.1-21.7; three at
// a time was slower under both, 4.2 and 23.1 µs in one run each); each
// level three times the size of the one above and a base level of
// 64 MiB, not Badger's ten times and 10 MiB, so that a state written
// behind is rewritten by fewer bytes of compaction on its way down
// (Badger sizes its levels from the last one's size, so the tree keeps
// the levels it needs: BenchmarkPerEvent at 10M keys, 4M-event runs in
// the same hour: under uniform keys 323 bytes written to disk per event
// against 569, 28.2-29.4 µs of CPU against 36.0 and 20.8-21.8 µs per
// event against 24.5 in two runs; under Zipf keys 48 bytes against 68
// and 3.7 µs per event either way; ten or five with a base level of 10
// or 64 MiB, and four with 128 MiB, were slower, two with 64 MiB as fast);
// no compression and no block cache
// (a read finds its block in the table's file mapping and decodes
// nothing); Badger's 4 KiB blocks (16 KiB and 1 KiB took 22.3 and 22.0
// µs per event under uniform keys, in the hour of the 21.5 µs above);
// 2 MiB tables on every level; memtables of an eighth of Badger's share
// (8 MiB at a 256 MiB budget: 4 MiB took 23.4 µs under uniform keys and
// wrote 383 bytes per event); no transaction conflict detection; no
// metrics.
// Adjust the logger and anything else with the With methods.
//
//	db, err := badger.Open(keyedstate.BadgerOptions(dir, 256<<20))
//	rt, err := keyedstate.New(g, codec, db, keyedstate.WithMemoryBudget(256<<20))
func BadgerOptions(dir string, budget int64) badger.Options {
	memtable := max(budget/BadgerShare/8, 1<<20) // two, plus one being written to level 0
	opts := badger.DefaultOptions(dir).
		WithMemTableSize(memtable).
		WithNumMemtables(2).
		WithBaseTableSize(2 << 20).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0). // unencrypted tables keep their index in the file mapping
		WithCompression(options.None).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(64 << 20).
		WithLevelSizeMultiplier(3).
		WithBaseLevelSize(64 << 20).
		WithNumCompactors(2).
		WithDetectConflicts(false).
		WithMetricsEnabled(false)
	opts.TableSizeMultiplier = 1
	if dir == "" {
		// In memory (tests): there is no value log, every value stays in
		// the LSM tree and must fit a write batch.
		opts = opts.WithValueThreshold(min(1<<20, memtable/16))
	}
	return opts
}

// valueThreshold: stored states longer than this go to the value log.
const valueThreshold = 32

// BadgerBytes is the memory Badger takes as opts configure it, as the
// runtime counts it in its budget: the memtables and one more being
// written to level 0, the buffers Badger keeps pooled for the table
// builders of compactions (8 × 2 base table sizes), and the block and
// index caches. Not counted: the buffers of the tables a compaction is
// building at the moment (a few base table sizes each, freed when it
// ends), and, for unencrypted tables, their indexes, bloom filters and
// the blocks read, which are in the tables' file mapping (page cache).
func BadgerBytes(opts badger.Options) int64 {
	return opts.MemTableSize*int64(opts.NumMemtables+1) + 2*pooledBuilders*opts.BaseTableSize +
		opts.BlockCacheSize + opts.IndexCacheSize
}

// readView is a Badger read transaction whose value-log reads are safe
// from the value-log GC: Badger deletes a rewritten value-log file at
// once unless an iterator is open, so a Get that found its pointer into
// the file just before the GC moved the value would read from a deleted
// file (Badger then logs and returns an empty value). The view keeps one
// key iterator (on a key that does not exist) open, so deletions wait
// until the view is closed.
type readView struct {
	txn *badger.Txn
	pin *badger.Iterator
}

// pinKey is a key nothing writes, for the pinning iterator.
var pinKey = []byte("\xffkeyedstate/pin")

func openReadView(db *badger.DB) readView {
	txn := db.NewTransaction(false)
	return readView{txn: txn, pin: txn.NewKeyIterator(pinKey, badger.IteratorOptions{})}
}

func (v readView) close() {
	v.pin.Close()
	v.txn.Discard()
}
