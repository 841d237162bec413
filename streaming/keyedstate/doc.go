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
//   - [Stats]: cache, flush and memory counters, and the records an
//     operator refused (streaming.Rejected) for the runtime's metrics.
//
// # Memory
//
// One budget (WithMemoryBudget, default 64 MiB) covers, and New refuses a
// budget too small for:
//
//   - Badger's memtables and block and index caches, as configured on the
//     DB (read from its options; BadgerOptions sizes them at a quarter of
//     the budget; WithDBShare splits them between runtimes sharing a DB);
//   - two write-behind batches (WithWriteBatchBytes): one filled while
//     the other is written;
//   - the keys changed since the last saved cut: a compact list of their
//     encoded bytes (a key's length plus one or two bytes, not a map
//     entry) and the few deleted keys;
//   - a pending cut: its key list, its sorted index (8 bytes per key) and
//     the states copied aside on write;
//   - the cache, which gets what the others leave: at most (budget − the
//     rest) / entry bytes instances, measured per instance at
//     construction or set with WithEntryBytes. It shrinks while changed
//     keys accumulate and grows back when a saved cut takes them (at
//     least one instance stays).
//
// Not covered: the file mapping of Badger's tables (their index, bloom
// filters and the blocks read; the kernel's page cache, counted in the
// process's RSS as file-backed pages and reclaimed under pressure), Go's
// garbage-collector headroom (set GOMEMLIMIT near the budget to bound it),
// the records and outputs in flight, and for an in-memory DB its tables.
// A CLOCK sweep evicts the coldest cached key; a new key enters without
// its reference bit, so a key seen once leaves before the keys in use.
// An evicted key whose state changed since it was loaded goes to a
// write-behind buffer; a full buffer is handed to one background flusher
// that writes it with one Badger WriteBatch — never a transaction per
// event. At most one buffer is being filled and one flushed; when the
// flusher is behind, the hot path waits (back-pressure) instead of
// growing a queue. Lookups read through one Badger read transaction,
// renewed after every flush.
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
// any size restores, and keys come into the cache as they are used.
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
