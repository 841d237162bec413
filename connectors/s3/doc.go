// Package s3 keeps tflo's durable state and its Parquet archive in an S3
// bucket (AWS or an S3-compatible server such as MinIO or versitygw),
// through github.com/aws/aws-sdk-go-v2/service/s3.
//
// # Main types
//
//   - [Store]: a streaming.StateStore that never sends one PUT per key.
//     SaveBatch packs the whole batch into one segment object and commits
//     it by rewriting one manifest object: 2 PUTs whatever the batch size.
//     Load of one key is one ranged GET (plus one GET of the manifest on a
//     cold Store: at most 2 GETs). DeleteKeys removes many keys in one
//     commit and drops emptied segments with DeleteObjects. Compaction
//     rewrites segments once dead bytes pass a threshold. Scan (the
//     [Scanner] capability) restores a whole shard with one GET per
//     segment.
//   - [CursorStore]: a streaming.CursorStore, one small object per cursor
//     key (cursors are per shard, not per record key), fenced by epoch.
//   - [Archive]: the Parquet archive's object store (connectors/parquet's
//     Archive interface) on an S3 prefix; PutAtomic is a single PUT. It
//     also has the capabilities rolling files need (archive_upload.go): a
//     file in progress is a multipart upload under the archive's hidden
//     staging prefix, completed at the checkpoint commit
//     (CompleteMultipartUpload) and moved to its name with a server-side
//     copy (CopyObject; UploadPartCopy parts for a file over CopyObject's
//     5 GiB) and a delete; every step is idempotent, so a commit or
//     restore repeated after a crash at any request ends in the same
//     objects. Parts are at least 5 MiB (WithMinPartSize lowers it for
//     test servers); a restore aborts the uploads no record knows
//     (ListMultipartUploads), and a bucket lifecycle rule aborting
//     incomplete uploads after a day catches what a crash elsewhere
//     leaves.
//   - [RequestCounter]: smithy middleware counting requests by operation,
//     for tests and benchmarks; [RequestMetrics] is its Prometheus backend
//     (requests by operation and outcome, latency, body bytes).
//
// # Object layout (below the prefix given by WithPrefix)
//
//	manifest                                  the root commit point: keys of no shard, their segments and index
//	seg/<generation:020d>-<random:08x>.seg    immutable segment objects: records and a checksummed trailer
//	shards/s-<escaped shard>/manifest         one shard's commit point (shards/h-<sha256>/ for a long name)
//	shards/s-<escaped shard>/seg/...          that shard's segments
//	cursor/k-<hex(key)> | cursor/h-<sha256>    one CursorStore record per cursor key (hashed when the key is long)
//	epochs/k-<hex(name)> | epochs/h-<sha256>  the last epoch Store.ClaimEpoch claimed under a name, in decimal
//
// Each shard's keys — by default the keys a streaming.Checkpointer writes
// for its shard, see WithShardOf — have their own manifest and segments,
// so any number of workers checkpointing different shards share one
// prefix (and one Store per worker) without ever writing the same object.
// Keys of no shard share the root manifest. A shard's key that is not in
// its shard's manifest is also looked up in the root one, where stores
// written before shards had manifests of their own kept every key; a
// shard's key deleted is removed from both, so the old layout drains away
// as checkpoints merge their runs.
//
// A segment holds self-delimiting records (key, streaming.MarshalSnapshot
// bytes with their own CRC32C) and a trailer with the record count and a
// CRC32C of all records, so every segment describes itself. The manifest
// names the live segments and maps every key to (segment, offset, length);
// it is CRC32C-checked as a whole and stored zstd-compressed. Byte formats
// are in format.go; both decoders are fuzzed.
//
// # Untrusted bucket contents
//
// Anyone with write access to the bucket can change its objects, so
// nothing read from it drives a request or an allocation unchecked: a
// manifest naming a segment that is not of the form
// seg/<generation:020d>-<random:08x>.seg, larger than one PUT can write
// (5 GiB) or whose size and record bytes disagree is refused as corrupt
// (names reach GET and DeleteObjects); a whole-object GET refuses an
// object larger than its bound (the manifest size for a segment, 1 GiB
// for a manifest) before reading it; a ranged GET checks the server's
// ContentLength against the record length before allocating. Errors wrap
// streaming.ErrCorrupt and name the object.
//
// # Commit order and crash safety
//
// A commit is: (1) PUT the new segment, under a name never used before;
// (2) PUT the manifest, conditional on the ETag this Store last read
// (If-Match, or If-None-Match "*" for the first); (3) DeleteObjects of the
// segments the new manifest no longer names. Each PUT is atomic on S3:
// readers see the old object or the whole new one. So a crash
//
//   - before or during (1) leaves the old manifest and old segments: the
//     previous commit, intact; the batch was not saved (SaveBatch had not
//     returned nil, so the checkpointer does not save the cursor);
//   - between (1) and (2) leaves an orphan segment no manifest names: the
//     state is still the previous commit; Compact deletes the orphan once
//     a later commit has reached its generation (Compact never takes a
//     segment above the committed generation: it may be another writer's
//     commit in flight);
//   - between (2) and (3) leaves the new commit in force plus old segments
//     no manifest names: garbage only, swept by Compact;
//   - during (3) leaves some of that garbage.
//
// Segments are never modified and are deleted only after a manifest that
// no longer names them is committed, so a manifest always names segments
// that exist. A reader in another process holding an older manifest may
// find a segment compacted away; Load then rereads the manifest once.
//
// # One writer per shard
//
// A shard's manifest has one writer: the shard's owner. A second writer —
// a zombie owner after a rebalance — is caught by the conditional
// manifest PUT (WithConditionalWrites, on by default): one of the two
// commits fails with an error wrapping ErrConflict and changes nothing
// (its segment is an orphan). A refused PUT (412, or AWS's 409
// ConditionalRequestConflict) is checked with one GET of the manifest: a
// PUT the SDK retried after its reply was lost is refused by its own
// write, and the manifest is then this commit's, which succeeded. The conflict alone does not tell which
// writer is the zombie — the rightful owner may be the one that lost the
// race — so it does not wrap streaming.ErrFenced: the caller retries,
// which rereads the manifest, and epochs decide. A streaming.Checkpointer
// checks the stored checkpoint manifest's epoch before every commit of
// its own; with WithEpochFencing the store also records the highest
// snapshot epoch per manifest and refuses (wrapping streaming.ErrFenced)
// batches of older epochs.
//
// # Request costs
//
//	SaveBatch(n items)   2 PUTs (+1 GET per compacted segment, +1 DeleteObjects when segments empty out)
//	Load                 1 ranged GET (+1 GET of the key's manifest on a cold Store, +1 of the root one for a shard's key)
//	ListKeys             1 LIST of the shard manifests (+1 GET per manifest on a cold Store)
//	Scan                 1 LIST, 1 GET per live segment (+1 GET per manifest on a cold Store)
//	DeleteKeys(n keys)   1 PUT (+1 DeleteObjects per 1000 emptied segments)
//	Archive.PutAtomic    1 PUT
//	Archive.Open         1 HEAD, then 1 GET per 1 MiB block read (or per large read)
//
// Compaction runs inside a commit: once dead record bytes pass the ratio
// of WithCompaction, segments at least that dead are read (one GET each)
// and their live records copied into the commit's new segment; and when
// more than WithMaxSegments segments would be live, the smallest are
// folded in the same way. Either way the commit stays 2 PUTs.
//
// The manifest is rewritten on every commit and grows with the number of
// keys (about key length + 6 bytes per key, stored zstd-compressed: ~8
// bytes per key for 100k keys like "sensor/000123"). That is the price of
// a cold Load in 2 GETs: a commit of 1,000 changed keys into a 100k-key
// store sends ~0.8 MB of manifest beside ~0.1 MB of snapshots. Save of a
// single key is therefore a poor checkpoint: use SaveBatch.
//
// # Clients, credentials, TLS
//
// Credentials come from the standard AWS chain (environment, shared
// files, SSO, instance roles) or WithStaticCredentials; the secret never
// appears in errors or logs, and errors name the bucket, object and
// endpoint. WithEndpoint and WithPathStyle address S3-compatible servers;
// WithCACert and WithTLSConfig configure TLS. Every request body is a
// bytes.Reader, which is seekable, so signing and retries work over plain
// http too (the SDK refuses non-seekable bodies there); WithUnsignedPayload
// skips hashing the bodies (for TLS endpoints). A request the server does
// not answer within the response timeout (WithResponseTimeout, default a
// minute from the request fully sent to the response headers; the SDK
// tries 3 times) fails with an error wrapping ErrResponseTimeout, whatever
// the caller's context: uploads and downloads of any length are not cut.
//
// # Concurrency
//
// Store, CursorStore and Archive are safe for concurrent use and start no
// goroutines. A Store serialises the commits of each manifest (commits of
// different shards run in parallel); loads run in parallel with each
// other and with a commit, and see the last committed manifest.
package s3
