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
//
// # Memory
//
// The cache holds at most as many instances as fit the memory budget
// (WithMemoryBudget, measured per instance at construction or set with
// WithEntryBytes); a CLOCK sweep evicts the coldest. An evicted key whose
// state changed since it was loaded goes to a write-behind buffer; a full
// buffer (WithWriteBatchBytes) is handed to one background flusher that
// writes it with one Badger WriteBatch — never a transaction per event. At
// most one buffer is being filled and one flushed; when the flusher is
// behind, the hot path waits (back-pressure) instead of growing a queue.
// Not counted in the budget: the set of keys changed since the last cut
// (a map entry per changed key, emptied by every cut) and Badger's own
// caches and memtables (configured on the DB).
//
// # Checkpoints
//
// Cut (called by the Checkpointer from any goroutine) marks a consistent
// cut between two Process calls: it swaps the set of keys changed since the
// last cut for an empty one and records the cursor — O(1), the only time
// the hot path waits. The cut is copy-on-write: before the hot path first
// changes (or evicts) a key of a pending cut, the key's state as of the cut
// is saved aside; a key not touched since the cut still holds its cut
// state wherever it lives (cache, write-behind buffer, Badger), and the
// saver reads it from there — Badger reads through a read transaction
// opened under the lock, so later flushes are invisible to it. Pieces are
// sorted runs of (key, state or tombstone) entries, so runs merge in a
// streaming k-way merge with one piece per run in memory (MergeRuns).
//
// At most one cut is pending. Its memory is the states saved aside for
// keys changed while it is pending (at most one per key of the cut); it is
// freed when the Checkpointer releases the cut.
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
