// Package parquet is tflo's Parquet archive of derived signals: the files
// backfills replay.
//
// # Main types
//
//   - [Archive]: the small object-store contract the archive lives in
//     (List, Open as io.ReaderAt plus size, PutAtomic). [LocalArchive] is
//     a local folder (temp file + fsync + rename); connectors/s3 implements
//     it on S3 (one PUT per file); [MemArchive] is for tests.
//   - [Row]: one derived signal, the archive's fixed schema (documented on
//     the type). [SchemaFingerprint] is a stable hash of that schema; every
//     file stores it in its key-value metadata under [FingerprintKey], and
//     the checkpointer stamps it into streaming.SnapshotMeta.
//   - [Writer]: buffers one shard's rows and writes zstd-compressed files
//     with row groups of a configurable size, named by [FileKey]
//     (pipeline, shard, epoch, first offset, last offset). Names are
//     deterministic, so a replay rewrites the same file.
//   - [Reader]: lists an archive prefix, refuses files whose fingerprint is
//     not the expected one ([FingerprintError] names the file and both
//     fingerprints), and streams rows in order, one row group at a time,
//     from any [Position] (file, row) — the resume point of a backfill.
//
// # Integrity
//
// Every file carries a whole-file CRC-32C in its key-value metadata
// ([ChecksumKey]); the reader verifies it before decoding a file, and
// checks the footer's layout against the schema, so a corrupt file is
// refused with an error naming it (wrapping streaming.ErrCorrupt) instead
// of decoding garbage or crashing the decoder.
//
// # Ordering and replays
//
// File names sort as (shard, first offset, last offset, epoch). When the
// same offset range was archived under several epochs (a replay after a
// rebalance), the reader keeps the file of the highest epoch; when a file
// overlaps offsets an earlier file already covered, the reader skips the
// rows at or below the offsets already read. So each source offset's rows
// are read once.
//
// # Concurrency
//
// Archives are safe for concurrent use. A Writer and a Reader are each
// owned by one goroutine; use one Writer per shard owner and epoch.
package parquet
