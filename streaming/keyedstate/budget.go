package keyedstate

import (
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BadgerShare is the fraction of a memory budget BadgerOptions gives
// Badger's memtables and caches: one quarter.
const BadgerShare = 4

// minBadgerBytes is the least BadgerOptions gives Badger whatever the
// budget: two memtables of 1.1 MiB and a block cache of 0.75 MiB.
const minBadgerBytes = 3 << 20

// BadgerOptions returns Badger options for the state database at dir
// (dir "" and WithInMemory(true) for tests) sized from a memory budget
// of budget bytes: Badger's two memtables and its block cache take a
// quarter of it (at least 3 MiB), and New, given the same budget with
// WithMemoryBudget, reads them back from the DB and keeps the rest for
// the runtime. Badger is tuned for the runtime's point reads and batch
// writes of small states: no compression (a read then decodes nothing and
// the block cache holds no copies), no transaction conflict detection,
// no metrics, values above a sixteenth of a memtable in the value log.
// Adjust the logger and anything else with the With methods.
//
//	db, err := badger.Open(keyedstate.BadgerOptions(dir, 256<<20))
//	rt, err := keyedstate.New(g, codec, db, keyedstate.WithMemoryBudget(256<<20))
func BadgerOptions(dir string, budget int64) badger.Options {
	share := max(budget/BadgerShare, minBadgerBytes)
	memtable := share * 3 / 8 // two memtables: three quarters of the share
	return badger.DefaultOptions(dir).
		WithMemTableSize(memtable).
		WithNumMemtables(2).
		WithBlockCacheSize(share - 2*memtable).
		WithIndexCacheSize(0). // unencrypted tables keep their index in the file mapping
		WithCompression(options.None).
		WithValueThreshold(min(1<<20, memtable/16)).
		WithValueLogFileSize(64 << 20).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithNumCompactors(2).
		WithDetectConflicts(false).
		WithMetricsEnabled(false)
}

// badgerBytes is the memory Badger's memtables and caches take as
// opts configure them.
func badgerBytes(opts badger.Options) int64 {
	return opts.MemTableSize*int64(opts.NumMemtables) + opts.BlockCacheSize + opts.IndexCacheSize
}
