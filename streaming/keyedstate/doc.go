// Package keyedstate is the keyed runtime for working sets larger than
// memory: one streaming.Instance of a streaming.Graph per key, the hot keys
// in a bounded in-memory cache and the rest in Badger, plus the
// checkpoint source (streaming.CheckpointSource) that the
// streaming.Checkpointer drives.
//
// # Main types
//
//   - [Runtime]: the keyed runtime. [Runtime.Process] runs a batch of
//     records ([Tx.Eval], [Tx.Delete]) and records the cursor of the last
//     one ([Tx.SetCursor]); [Runtime.Apply] does it for one record.
//   - [KeyCodec]: how a key becomes Badger and piece bytes ([StringKeys],
//     [Uint64Keys]).
//   - [BadgerOptions]: the state database's options, sized from the same
//     memory budget as the runtime.
//   - [Stats]: cache, flush and memory counters, the records an
//     operator refused (streaming.Rejected), and the keys held, refused
//     at the cap, expired and quarantined, for the runtime's metrics.
//
// # Memory
//
// One budget (WithMemoryBudget, default 64 MiB) is meant as the resident
// memory of the runtime and its Badger database, with the process run at
// GOMEMLIMIT equal to its runtimes' budgets. A third of it (WithGCHeadroom)
// is left free for the garbage collector, so that it does not collect all
// the time; the rest covers what is live, and New refuses a budget too
// small for:
//
//   - Badger's memtables, the buffers it pools for compactions and its
//     block and index caches, as configured on the DB (BadgerBytes of its
//     options; WithDBShare splits them between runtimes sharing a DB).
//     BadgerOptions sizes the memtables from the budget, but the pooled
//     buffers are a fixed 32 MiB: Badger takes about a fifth of 256 MiB
//     and over half of 64 MiB;
//   - two write-behind batches (WithWriteBatchBytes): one filled while
//     the other is written;
//   - the keys changed since the last saved cut: a compact list of their
//     encoded bytes (a key's length plus one or two bytes, not a map
//     entry) and the few deleted keys. A list that outgrows an eighth of
//     what the budget leaves the cache (keys keep changing while
//     checkpoints fail) is spilled to Badger as a sorted run, which the
//     save of the cut merges back;
//   - a pending cut: its key list, its sorted index (8 bytes per key) and
//     the states copied aside on write;
//   - the admission's frequency sketch (below): 16 bytes per key the
//     cache can hold, rounded up to a power of two (a cache of fewer than
//     512 keys has none);
//   - the cache, which gets what the others leave: at most (budget − GC
//     headroom − the rest) / entry bytes instances, measured per instance at
//     construction or set with WithEntryBytes. It shrinks while changed
//     keys accumulate and grows back when a saved cut takes them (at
//     least one instance stays).
//
// Not covered: the file mappings of Badger's tables and value log (table
// indexes, bloom filters and the blocks and values read: the kernel's page
// cache, counted in the process's RSS as file-backed pages, RssFile, and
// reclaimed under memory pressure), the buffers of the tables a compaction
// is building at the moment, the records and outputs in flight, and for an
// in-memory DB its tables.
// While a runtime is open on an on-disk DB, the mappings of its tables
// and value-log files are advised for random reads (MADV_RANDOM, Linux):
// when the page cache cannot hold them, a fault reads the page it needs,
// not the disk's read-ahead around it (advise_linux.go).
//
// A CLOCK sweep evicts the coldest cached key; a new key enters without
// its reference bit, so a key seen once leaves before the keys in use.
// A full cache admits a key only if it was used more often lately than
// the key the sweep would evict (TinyLFU: a count-min sketch of byte
// counters, halved every 10 to 160 uses per key the cache holds, the
// period adapted to the hit ratio: see admit.go); otherwise the
// cached key stays, the record is applied on a spare instance and the
// state goes straight to the write-behind buffer. Under skewed keys the
// long tail then no longer pushes warm keys out (Stats.NotAdmitted).
// An evicted key whose state changed since it was loaded goes to a
// write-behind buffer; a full buffer is handed to one background flusher
// that writes it with one Badger WriteBatch — never a transaction per
// event. At most one buffer is being filled and one flushed; when the
// flusher is behind, the hot path waits (back-pressure) instead of
// growing a queue. Lookups read through one Badger read transaction,
// renewed after every flush, on the hot path itself: reading a chunk's
// misses ahead on a second goroutine (its keys known before Process
// evaluates them) was measured and made both distributions slower in
// BenchmarkPerEvent at 10M keys, as it costs more CPU than it overlaps
// and the second core is already busy with Badger's compactions, the
// flusher and the garbage collector: uniform keys 30.3 µs a record
// against 25.7 µs (43.8 against 37.0 µs of CPU), Zipf keys 4.2 against
// 3.9 µs. With BadgerOptions the states live in
// Badger's value log and its LSM tree holds keys and pointers; after
// every half value-log file it wrote, the flusher collects the log's
// garbage (files at least half overwritten).
//
// # Checkpoints
//
// Every change is stamped with a generation, kept on the cached entry and
// in the header of the stored state. Cut (called by the Checkpointer from
// any goroutine) marks a consistent cut between two Process calls: it
// closes the current generation, moving the list of keys changed since
// the last cut to the cut, and records the cursor — O(1), the only time
// the hot path waits. The cut is copy-on-write: before the hot path first
// changes (or evicts, or deletes) a key of a pending cut, the key's state
// as of the cut is saved aside; a key not touched since the cut still
// holds its cut state wherever it lives (cache, write-behind buffer,
// Badger), and the saver reads it from there — Badger reads through a
// read transaction opened under the lock, so later flushes are invisible
// to it. Saving a cut costs O(changed keys): its keys are sorted (once,
// outside the lock), each is located, and nothing else is read. Pieces
// are sorted runs of (key, state or tombstone) entries, so runs merge in
// a streaming k-way merge with one piece per run in memory (MergeRuns).
//
// At most one cut is pending. A cut the Checkpointer releases as unsaved
// gives its keys back to the next cut.
//
// Restore writes the checkpoint to Badger and loads nothing: a state of
// any size restores, and keys come into the cache as they are used. It
// first drops everything under the runtime's prefix, so a process starts
// with a Restore (with no pieces when there is no checkpoint yet) to
// clear what an earlier process left in the DB. A restore of more than a
// memtable ends by compacting the DB (Badger's Flatten), so that a lookup
// searches one level, not a dozen level-0 tables and three levels: the
// other runtimes on the DB pause their write-behind flushes meanwhile
// (seconds at 10M keys). See compact.go.
//
// # Hostile keys
//
// A key whose stored state does not load (Instance.Load refuses it: a
// poisoned or corrupt state in a checkpoint) is quarantined, not an error
// of the shard: its state is reset, the record applied to the fresh
// state, the refusal counted (Stats.Quarantined) and reported
// (WithQuarantine); the next checkpoint overwrites the bad state.
//
// A key longer than Badger stores (MaxKeyBytes with the prefix) is
// refused with ErrKeyTooLong: its write-behind flush would fail and
// stop the runtime.
//
// WithMaxKeys caps the keys a runtime holds (in memory and in Badger,
// counted from the last Restore): a record of a new key over the cap is
// refused with ErrTooManyKeys (Stats.KeysRefused) and the keys held carry
// on. WithKeyTTL expires keys unseen for a duration of processing time:
// ExpireIdle deletes them with their state as Tx.Delete does, and the
// next checkpoint records the deletions. A stored value's header and a
// checkpoint piece's entry carry when the key was last seen, so a restore
// keeps each key's age (a checkpoint of piece format 1, without it,
// restores its keys as seen at the restore).
//
// # Concurrency
//
// A Runtime is safe for concurrent use, but it is built for one hot
// goroutine (the shard's) plus the Checkpointer: one mutex is held for each
// Process call, for marking a cut and for short stretches of a save. The
// *streaming.Instance that Tx.Eval returns may be read until the next call
// on the Tx or the Runtime by the same goroutine. Close drains the
// write-behind buffer and stops the flusher.
package keyedstate
