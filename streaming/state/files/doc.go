// Package files is a streaming.StateStore and streaming.CursorStore in one
// local folder: one file per snapshot and one per cursor.
//
// # Layout
//
// A key is arbitrary bytes, so it is encoded into a file name that is safe
// on every file system (including case-insensitive ones) and reversible:
// "s-" + the key in lower-case unpadded base32hex for a snapshot, "c-" + the
// same for a cursor. A key whose name would pass 200 bytes is stored as
// "sh-"/"ch-" + the SHA-256 of the key instead. Every file begins with its
// key (length, bytes, CRC32C), so a hashed name is reversed by reading it
// and a file is never taken for another key; then follows the checksummed
// streaming.MarshalSnapshot or streaming.MarshalCursorRecord encoding. A
// corrupt file is refused with an error naming the key and the file.
// Files starting with "." are temporary; "LOCK" holds the folder's lock.
//
// # Durability
//
// Every write is atomic: the bytes go to a temporary file in the folder,
// which is fsynced, renamed over the final name, and then the folder is
// fsynced, so a crash leaves either the old file or the new one visible,
// never a half-written one. SaveBatch writes its files in parallel and
// fsyncs the folder once for the whole batch; a large batch on Linux
// replaces the per-file fsyncs with one syncfs(2) between writing every
// temporary file and renaming any of them. A batch is atomic per key, not
// as a whole.
//
// One file per key costs a handful of system calls per key: for large
// checkpoints of small snapshots the Badger store is an order of magnitude
// faster (see BenchmarkCheckpointSaveBatch100k in testsuite/statetest). WithSync(false) skips the fsyncs (tests only). One process owns
// a folder at a time: Open takes an exclusive flock on LOCK (on Linux and
// the BSDs) and fails with ErrLocked if another process (or another Open
// in this one) holds it; stale temporary files a crash left behind are
// removed at Open. Workers that share checkpoints share a parent folder:
// package pipeline opens one store per shard, <dir>/<pipeline>/<shard>,
// while it owns the shard.
//
// # Concurrency and blocking
//
// A Store is safe for concurrent use. It owns a pool of I/O goroutines
// (WithIOWorkers) started by Open and stopped by Close; every file system
// call runs there, never on the caller's goroutine, so a caller on the hot
// path can give up at its ctx deadline even while a disk stalls. A call
// that returns ctx.Err() after its work was handed over may still take
// effect later — atomically, as above — but never over the file of a
// later call for the same key: each key's files are put in place (or
// deleted) in call order, and a write a later one has overtaken is
// dropped (a checkpoint manifest never goes back to an older one, and a
// deleted piece does not come back). A context already done when
// a call starts changes nothing. SaveCursor's read-compare-write runs under one
// lock, so concurrent writers are fenced correctly; so does SaveIfUnchanged's
// (the streaming.ConditionalSaver a Checkpointer commits its manifests
// with), a compare-and-set in the process, and across processes by the
// folder's flock on LOCK, which needs a file system where flock(2)
// excludes other processes (a local one).
package files
