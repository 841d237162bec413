// Package parquet is tflo's Parquet archive of derived signals: the files
// backfills replay.
//
// # Main types
//
//   - [Archive]: the small object-store contract the archive lives in
//     (List, Open as io.ReaderAt plus size, PutAtomic). [LocalArchive] is
//     a local folder (temp file + fsync + rename); connectors/s3
//     implements it on S3; [MemArchive] is for tests. Optional
//     capabilities, found by type assertion: [Uploader] (objects built
//     from parts, invisible until completed), [Mover], [Deleter],
//     [PageLister], [UploadLister]; connectors/s3 and [MemArchive] have all
//     five, [LocalArchive] all but [UploadLister].
//   - [Row]: one derived signal, the archive's fixed schema (documented on
//     the type). [SchemaFingerprint] is a stable hash of that schema; every
//     file stores it in its key-value metadata under [FingerprintKey], and
//     the checkpointer stamps it into streaming.SnapshotMeta.
//   - [RollingWriter]: one shard's archive, exactly once and in large
//     files (below). The API a pipeline's archive sink calls: Restore on
//     assign, Append per record, PreCommit at a checkpoint's cut, Commit
//     after the checkpoint's state committed, Roll before a shard's last
//     checkpoint.
//   - [Sink]: the pipeline runtime's archive sink (streaming.Sink with
//     the commit, restore and cut-marker capabilities): a RollingWriter
//     per shard driven by the shard's checkpoints; rows written between
//     a cut and its pre-commit are held until the pre-commit ran, so a
//     checkpoint makes exactly the rows of its cut durable.
//   - [Writer]: writes whole files at once (each Flush writes the
//     buffered rows as one file named by [FileKey], a file that failed
//     to be written again under its name); no pipeline uses it
//     any more: tests and tools use it to lay out archives, including
//     the overlapping files older writers left.
//   - [Reader]: reads an archive prefix in name order, page by page,
//     refuses files whose fingerprint is not the expected one
//     ([FingerprintError] names the file and both fingerprints), and
//     streams rows one row group at a time from any [Position].
//   - [Compact], [Summarize], [Verify]: the archive tools behind
//     `starter archive compact|ls|verify`.
//
// # Layout
//
// Published files are <pipeline>/shard-<6 digits>/<first>-<last>-e<epoch>.parquet
// (first and last source offset, 20 digits; the epoch of the owner that
// opened the file). Names are deterministic and sort as (shard, first,
// last, epoch). The archive's working objects live under [StagingDir]
// ("_tflo"): files being built (*.inprogress) with their row-group
// segments (*.inprogress.rg-<from>-<to>) and tail segments
// (*.inprogress.tb-<from>-<to>), pre-commit records per
// shard, compaction outputs being built. Names with an element starting
// with '_' or '.' are hidden from readers, as Hive, Spark and Arrow
// datasets hide them, and *.inprogress matches no *.parquet glob.
//
// # Exactly once: in progress, pending, committed
//
// The model is Flink's FileSink. A RollingWriter keeps one open file per
// shard, built a row group at a time and uploaded in parts; it finishes
// ("seals") the file at a target size (128 MiB) or age (15 minutes),
// between records, never at every checkpoint. PreCommit at a
// checkpoint's cut makes every row up to the cut durable: it uploads what
// a restore needs and writes a pre-commit record holding the open file's
// state (its parts, the rows not yet in a row group). The open file's
// row-group metadata goes beside it in row-group segments, each holding
// the row groups added since the previous pre-commit, and so do its
// encoded bytes too few for a part yet (S3's minimum is 5 MiB), in tail
// segments; the record lists both, so a pre-commit costs what it adds,
// not what the file holds.
// Commit, once the checkpoint's state committed, publishes the files
// sealed by then: completes the upload and moves the file to its name (on
// S3, CompleteMultipartUpload and a server-side copy). Restore, with the
// cut and epoch of the checkpoint a new owner restored, publishes what
// that checkpoint's record sealed, finishes its open file exactly as it
// stood at the cut, and discards everything later (records, uploads,
// parts). The source replays from after the cut, so every row is in
// exactly one published file, whatever crashed when: the tests crash
// every request of a scripted run, before and after it (connectors/s3),
// and random requests of random runs (memory and local folder). No
// reader, ours or another, sees a row twice.
//
// Files are assembled a row group at a time (the footer built from the
// collected metadata), so a file can grow across checkpoints and be
// finished by another process. The row groups are encoded column by
// column straight from the rows (the schema is fixed): the pages
// parquet-go's writer made of the same rows, at a fraction of its CPU,
// which matters because the archive runs on a pipeline's hot path. An
// independent reader (arrow-go) reads them back in the tests, and
// parquet-go reads them as it reads the files of older writers.
//
// # Compaction
//
// [Compact] rewrites runs of small files older than a minimum age into
// large files, shard by shard, publishing each output with one atomic
// move before deleting its inputs, and deletes files another file fully
// covers (left by older writers or an interrupted compaction). The output
// sorts after the run's first input and covers the others, so a reader
// listing in between reads each row once; a reader whose next file was
// deleted lists again and resumes by offset. Run one compaction at a
// time per archive. Its outputs are zstd's (level 3) whatever codec the
// inputs were written with.
//
// # Codecs
//
// Writers compress pages with zstd (the default, [WithZstdLevel]) or
// snappy ([WithCompression]): snappy spends a fifth to a third less CPU
// per row and writes larger files (BenchmarkRollingCompression), for a
// hot path short of CPU; compaction later rewrites its small files as
// zstd. Readers read both, a file may hold both (a next owner that
// finished a file in another codec), and a snappy page's declared length
// is checked against its header before it is decoded.
//
// # Integrity and hostile files
//
// Every file carries a whole-file CRC-32C in its key-value metadata
// ([ChecksumKey]); the reader verifies it before decoding a file's rows.
// A file edited and re-sealed passes that check, so the reader also
// bounds every field parquet-go would size an allocation from before
// parquet-go sees it: the footer length against the file's size, the
// footer's thrift lists against its bytes, each row group's pages (page
// sizes, value counts, zstd frame headers: declared content sizes and
// windows) against the row group and fixed limits. Corrupt files are
// refused with an error naming them and wrapping streaming.ErrCorrupt;
// decoder panics are recovered into such errors. Pre-commit records are
// checked the same way. The decoders are fuzzed.
//
// # Ordering and replays
//
// When the same offset range was archived under several epochs (the
// older writer's replays after a rebalance), the reader keeps the file of
// the highest epoch; when a file overlaps offsets an earlier file already
// covered, the reader skips the rows at or below the offsets already
// read. So each source offset's rows are read once. [Verify] reports such
// overlaps as duplicates (what other readers would count twice), and
// compaction removes them.
//
// # Concurrency
//
// Archives are safe for concurrent use. A Writer, a RollingWriter and a
// Reader are each owned by one goroutine; use one writer per shard owner
// and epoch. A Sink is safe for concurrent use across shards; per shard,
// Writes come from one goroutine and checkpoints (MarkCut, Flush,
// Commit) one at a time from another. Summarize and Verify read concurrently; Compact runs alone.
package parquet
