// Package badgerstore is a streaming.StateStore and streaming.CursorStore
// on Badger (github.com/dgraph-io/badger/v4), the embedded key-value store
// that also holds the keyed hot state.
//
// Open either opens a database of its own at a path (WithPath) or shares an
// existing *badger.DB (WithDB), so snapshots, cursors and the keyed hot
// state can live in one database; a key prefix (WithPrefix) keeps this
// store's keys apart from everything else in it. Snapshots are stored in
// the checksummed streaming.MarshalSnapshot encoding and cursor records in
// streaming.MarshalCursorRecord's, so a corrupt value is refused with an
// error naming the key.
//
// An in-memory Badger database (Options.InMemory) keeps every value in the
// LSM tree and refuses values above its ValueThreshold (at most 1 MiB):
// snapshots larger than that need a database on disk.
//
// SaveBatch is one badger.WriteBatch. A WriteBatch commits in as many
// internal transactions as the batch's size needs, so a batch is not atomic
// as a whole: after a crash some of its keys may hold the new snapshot and
// others the old one, each intact. (The Checkpointer's manifest is what
// makes a checkpoint all-or-nothing.) With WithSync(true), the default,
// every write is followed by db.Sync, so a save that returned nil survives
// a crash of the process whatever the database's SyncWrites option. Not
// always a crash of the machine: Badger (v4.9.6) syncs only the active
// memtable's log, so a save whose memtable filled and was swapped out
// before the Sync (frequent when the keyed state shares the database)
// sits in an unsynced log until Badger writes that memtable to level 0.
// Open the database with SyncWrites for power-loss durability, at the
// cost of a sync per write of the keyed state too.
//
// # Concurrency
//
// A Store is safe for concurrent use. Calls block on Badger I/O in the
// calling goroutine; ctx is checked before the call does anything and
// between every 1024 items of a batch — a batch cancelled part way may have
// written a prefix of its items. SaveCursor is a read-compare-write in one
// Badger transaction, under a lock of the package (the database may have
// been opened without conflict detection, as the pipeline's is), so
// concurrent writers are fenced correctly. SaveIfUnchanged (the
// streaming.ConditionalSaver a Checkpointer commits its manifests with)
// is a compare-and-set the same way: the stored snapshots are compared
// with what the writer read and the unchanged ones written in one
// transaction, so of two Stores on one database (two runtimes of one
// process) that read a manifest, only the first to write replaces it.
//
// A Store is a streaming.EpochClaimer: the epochs claimed under a name are
// kept in its database, which one process holds at a time.
package badgerstore
