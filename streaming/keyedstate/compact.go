package keyedstate

import (
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A large Restore goes through Badger's memtables into level 0 and down
// the levels, and leaves a handful of level-0 tables and the upper
// levels' remnants behind: every lookup then checks each level-0 table's
// Bloom filter and searches each level (measured at 10M keys: 9 level-0
// tables and three levels cost a miss some 2.5 µs of its 6). Badger
// compacts level 0 only when it holds NumLevelZeroTables, so under keys
// that are mostly read (Zipf: few writes) it may not for a long while
// (the writes of a long run fill the tree again all the same). Restore
// therefore ends with Badger's Flatten, as Badger advises after a restore,
// which compacts the tree into one level (when level 0 is that level and
// holds fewer tables than NumLevelZeroTables, Flatten leaves it: a
// restore of a few memtables into an empty DB stays in level 0).
//
// Flatten only ends when no new level-0 table appears during one of its
// compactions, so the runtimes sharing the DB pause their writes (the
// write-behind flushes and restores, which take the gate's read side)
// while one flattens (the write side): seconds at 10M keys. A restore
// holds the read side while it writes, so when several large shards
// restore at once, one waiting to flatten pauses the others' flushes
// until the restore being written ends and its own flatten is done (the
// RWMutex lets no new reader in while a writer waits). Other writes
// to the DB go on: lists of changed keys are small, but a large
// checkpoint written to the same DB (the pipeline's default durable
// store) meanwhile keeps adding level-0 tables, and Flatten lasts until
// it is written.

// dbGate is the gate of the runtimes sharing a DB, and the advisor of
// its file mappings while one is open.
type dbGate struct {
	sync.RWMutex
	users   int         // runtimes open on the DB (dbGates.mu held)
	advisor *mapAdvisor // advises the DB's file mappings for random reads (on disk; see advise_linux.go)
}

var dbGates struct {
	mu sync.Mutex
	m  map[*badger.DB]*dbGate
}

// acquireGate returns db's gate, counting the runtime as its user.
func acquireGate(db *badger.DB) *dbGate {
	dbGates.mu.Lock()
	defer dbGates.mu.Unlock()
	if dbGates.m == nil {
		dbGates.m = make(map[*badger.DB]*dbGate)
	}
	g := dbGates.m[db]
	if g == nil {
		g = &dbGate{}
		if o := db.Opts(); !o.InMemory {
			g.advisor = startAdvisor(o.Dir, o.ValueDir)
		}
		dbGates.m[db] = g
	}
	g.users++
	return g
}

// releaseGate forgets the runtime as a user of db's gate (Close).
func releaseGate(db *badger.DB) {
	dbGates.mu.Lock()
	defer dbGates.mu.Unlock()
	if g := dbGates.m[db]; g != nil {
		if g.users--; g.users <= 0 {
			delete(dbGates.m, db)
			if g.advisor != nil {
				g.advisor.close()
			}
		}
	}
}

// flattenWorkers is how many compactions Flatten runs at a time.
const flattenWorkers = 2

// compactAfterRestore flattens the DB when a restore wrote at least a
// memtable's worth (so it reached level 0), with the DB's other writers
// paused, and returns how long that took (0: it did not).
func (r *Runtime[K]) compactAfterRestore(written int64) (time.Duration, error) {
	if written < r.db.Opts().MemTableSize {
		return 0, nil
	}
	start := time.Now()
	r.gate.Lock()
	defer r.gate.Unlock()
	err := r.db.Flatten(flattenWorkers)
	return max(time.Since(start), time.Nanosecond), err
}
