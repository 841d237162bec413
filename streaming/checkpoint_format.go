package streaming

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"log/slog"
	"strconv"
	"time"

	"github.com/tflo-io/tflo/internal/wire"
)

// This file is the one home of a shard's checkpoints as they sit in the
// stores: which keys a checkpoint writes, what each record holds, how the
// manifest is encoded, in which order the records are written and how they
// are read back. The Checkpointer decides when; this file decides what and
// where.
//
// A shard's checkpoints are records in its StateStore, each a Snapshot
// (stores encode it with MarshalSnapshot, see snapshot_codec.go):
//
//	<shard>/piece/<epoch>/<checkpoint>/<n>  a piece of one checkpoint's state: Meta is
//	                                        the checkpoint's SnapshotMeta, Data the piece
//	                                        as the CheckpointSource emitted it
//	<shard>/manifest                        the commit point: Meta is the checkpoint's
//	                                        SnapshotMeta (cursor, epoch, operators,
//	                                        fingerprint), Data the manifest below
//
// and a CursorRecord under the key <shard> in the shard's CursorStore.
//
// Order of writes, per checkpoint: the pieces (SaveBatch calls of bounded
// size; several shards that share a store share the calls), then the
// manifest (after checking that no newer owner's manifest is stored; the
// manifests of several shards may share one SaveBatch, each stays its own
// key and its own commit point), then the cursor. A crash before the
// manifest leaves the previous manifest, cursor and pieces in agreement;
// pieces no manifest names are never read, and are deleted best effort:
// those a save replaced or failed to name at once, those a crash left
// by the first checkpoint committed after the manifest is read again
// (orphans).
//
// Manifest encoding (checkpointManifestVersion 1; integers unsigned
// varints unless noted):
//
//	version | checkpoint id | epoch | run count | runs... | crc32c (4 bytes LE)
//	run   = checkpoint id | piece count | pieces...
//	piece = len(key) key | size
//
// The checksum (Castagnoli) covers every byte before it. The bytes of
// every record are pinned by testdata/checkpoint-format-v1.golden: a
// change to them needs a new version and a reader for the old one.
const checkpointManifestVersion = 1

// maxManifestPieces bounds what a decoder accepts, so a corrupt count
// cannot make it allocate without bound.
const maxManifestPieces = 1 << 24

// Manifest names the pieces that together make up a shard's full state at
// one checkpoint: runs, oldest first, each the pieces one checkpoint wrote
// (or one compaction merged). A key's state is its entry in the newest run
// that has it.
type Manifest struct {
	ID    CheckpointID  `json:"id"`
	Epoch Epoch         `json:"epoch"`
	Runs  []ManifestRun `json:"runs"`
}

// ManifestRun is the pieces one checkpoint (or compaction) wrote, in the
// order the source emitted them.
type ManifestRun struct {
	ID     CheckpointID    `json:"id"`
	Pieces []ManifestPiece `json:"pieces"`
}

// ManifestPiece is one stored piece: its StateStore key and its size.
type ManifestPiece struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// Bytes returns the total size of the pieces the manifest names.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, r := range m.Runs {
		for _, p := range r.Pieces {
			n += p.Size
		}
	}
	return n
}

// MarshalManifest encodes m (versioned, CRC32C-checksummed).
func MarshalManifest(m Manifest) []byte {
	b := binary.AppendUvarint(nil, checkpointManifestVersion)
	b = binary.AppendUvarint(b, uint64(m.ID))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(len(m.Runs)))
	for _, r := range m.Runs {
		b = binary.AppendUvarint(b, uint64(r.ID))
		b = binary.AppendUvarint(b, uint64(len(r.Pieces)))
		for _, p := range r.Pieces {
			b = wire.AppendString(b, p.Key)
			b = binary.AppendUvarint(b, uint64(p.Size))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, wire.Castagnoli))
}

// UnmarshalManifest decodes a manifest made by MarshalManifest. Bytes that
// fail the checksum, are truncated, or carry another format version are
// refused with an error wrapping ErrCorrupt.
func UnmarshalManifest(b []byte) (Manifest, error) {
	if len(b) < 5 {
		return Manifest{}, fmt.Errorf("checkpoint manifest: %d bytes is too short: %w", len(b), ErrCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, wire.Castagnoli); got != sum {
		return Manifest{}, fmt.Errorf("checkpoint manifest: checksum %08x does not match stored %08x: %w", got, sum, ErrCorrupt)
	}
	r := wire.Reader{B: body}
	if v := r.Uvarint(); r.Err == nil && v != checkpointManifestVersion {
		return Manifest{}, fmt.Errorf("checkpoint manifest: format version %d, this build reads %d: %w", v, checkpointManifestVersion, ErrCorrupt)
	}
	var m Manifest
	m.ID = CheckpointID(r.Uvarint())
	m.Epoch = Epoch(r.Uvarint())
	nRuns := r.Uvarint()
	total := uint64(0)
	for i := uint64(0); i < nRuns && r.Err == nil; i++ {
		var run ManifestRun
		run.ID = CheckpointID(r.Uvarint())
		nPieces := r.Uvarint()
		total += nPieces
		if total > maxManifestPieces || nPieces > uint64(len(body)) {
			return Manifest{}, fmt.Errorf("checkpoint manifest: run %d claims %d pieces: %w", run.ID, nPieces, ErrCorrupt)
		}
		for j := uint64(0); j < nPieces && r.Err == nil; j++ {
			key := r.Str()
			size := r.Uvarint()
			run.Pieces = append(run.Pieces, ManifestPiece{Key: key, Size: int64(size)})
		}
		m.Runs = append(m.Runs, run)
	}
	if r.Err != nil {
		return Manifest{}, fmt.Errorf("checkpoint manifest: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(body) {
		return Manifest{}, fmt.Errorf("checkpoint manifest: %d trailing bytes: %w", len(body)-r.Off, ErrCorrupt)
	}
	return m, nil
}

// shardRecords reads and names the records of one shard's checkpoints.
type shardRecords struct {
	shard string
	store StateStore
}

func (r shardRecords) manifestKey() []byte { return CheckpointManifestKey(r.shard) }

func (r shardRecords) pieceKey(epoch Epoch, id CheckpointID, n int) string {
	return CheckpointPieceKey(r.shard, epoch, id, n)
}

// refresh has a store that caches what it read reread the shard's
// manifest: another process may have checkpointed the shard since this
// one last read it (a worker regaining a shard it held before).
func (r shardRecords) refresh(ctx context.Context) error {
	rf, ok := r.store.(keyRefresher)
	if !ok {
		return nil
	}
	if err := rf.RefreshKey(ctx, r.manifestKey()); err != nil {
		return fmt.Errorf("refresh manifest %q: %w", r.manifestKey(), err)
	}
	return nil
}

// readManifest loads and decodes the committed manifest, and returns the
// record it was read from; an error wraps ErrNotFound when the shard has
// none.
func (r shardRecords) readManifest(ctx context.Context) (Manifest, Snapshot, error) {
	s, err := r.store.Load(ctx, r.manifestKey())
	if err != nil {
		return Manifest{}, Snapshot{}, fmt.Errorf("load manifest %q: %w", r.manifestKey(), err)
	}
	m, err := UnmarshalManifest(s.Data)
	if err != nil {
		return Manifest{}, Snapshot{}, fmt.Errorf("manifest %q: %w", r.manifestKey(), err)
	}
	return m, s, nil
}

// manifestRecord is the record that commits m.
func (r shardRecords) manifestRecord(m Manifest, meta SnapshotMeta) KeyedSnapshot {
	return KeyedSnapshot{Key: r.manifestKey(), Snapshot: Snapshot{Meta: meta, Data: MarshalManifest(m)}}
}

// loadRun yields a run's pieces in order; when cur is not nil it holds the
// key of the piece last yielded.
func (r shardRecords) loadRun(ctx context.Context, run ManifestRun, cur *string) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for _, pc := range run.Pieces {
			if cur != nil {
				*cur = pc.Key
			}
			s, err := r.store.Load(ctx, []byte(pc.Key))
			if errors.Is(err, ErrNotFound) {
				// The manifest names it: the checkpoint is damaged. Not
				// ErrNotFound, which says nothing is stored (a caller
				// starts the shard empty on it).
				yield(nil, fmt.Errorf("piece %q of checkpoint %d, named by the manifest, is missing (%v): %w", pc.Key, run.ID, err, ErrCorrupt))
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("load piece %q of checkpoint %d: %w", pc.Key, run.ID, err))
				return
			}
			if int64(len(s.Data)) != pc.Size {
				yield(nil, fmt.Errorf("piece %q of checkpoint %d: %d bytes, manifest says %d: %w", pc.Key, run.ID, len(s.Data), pc.Size, ErrCorrupt))
				return
			}
			if !yield(s.Data, nil) {
				return
			}
		}
	}
}

// loadAll yields every piece the manifest names, oldest run first,
// counting the pieces yielded.
func (r shardRecords) loadAll(ctx context.Context, m Manifest, cur *string, count *int) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for _, run := range m.Runs {
			for data, err := range r.loadRun(ctx, run, cur) {
				if err == nil {
					*count++
				}
				if !yield(data, err) {
					return
				}
			}
		}
	}
}

// keyRefresher is the optional capability of a StateStore that caches
// what it read (the S3 store caches each shard's manifest): RefreshKey
// makes the next read of key see what another process wrote since.
type keyRefresher interface {
	RefreshKey(ctx context.Context, key []byte) error
}

// ShardKeyLister is the optional capability of a StateStore that lists
// one shard's checkpoint keys (those CheckpointKeyShard gives it) without
// listing the other shards': the sweep of a restored shard's orphaned
// pieces asks it instead of ListKeys, which on a store of many shards
// lists them all for each shard restored (the S3 and Badger stores have
// it). It may return other keys too; the sweep keeps only the shard's
// pieces.
type ShardKeyLister interface {
	ListShardKeys(ctx context.Context, shard string) ([][]byte, error)
}

// keyDeleter is the optional batch-delete capability of a StateStore
// (the files, Badger, memory and S3 stores have it).
type keyDeleter interface {
	DeleteKeys(ctx context.Context, keys [][]byte) error
}

// drop deletes pieces no manifest names, best effort (a crash leaves them
// behind; they are never read). A store with DeleteKeys gets them in one
// call: one Delete each is a rewrite of the whole shard manifest on S3
// and a folder fsync or a sync for the files and Badger stores, and a
// merge's pieces would run past the timeout, the rest left for good.
// The deletes end with ctx, the caller's: a caller that gave up (a worker
// shutting down) must not wait out timeout, its stage lock held, against
// a store that stopped answering.
func (r shardRecords) drop(ctx context.Context, keys []string, timeout time.Duration, log *slog.Logger) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if d, ok := r.store.(keyDeleter); ok {
		bs := make([][]byte, len(keys))
		for i, k := range keys {
			bs[i] = []byte(k)
		}
		if err := d.DeleteKeys(ctx, bs); err != nil {
			log.Debug("drop unreferenced pieces", "shard", r.shard, "pieces", len(keys), "err", err)
		}
		return
	}
	for _, k := range keys {
		if err := r.store.Delete(ctx, []byte(k)); err != nil {
			log.Debug("drop unreferenced piece", "shard", r.shard, "key", k, "err", err)
			return
		}
	}
}

// orphans returns the shard's pieces that runs (just committed, at epoch
// and id) do not name and that this owner or an older one wrote, at an
// epoch below epoch or at epoch up to id: pieces of a checkpoint whose
// manifest never landed (a crash between the pieces and the manifest) or
// whose deletes failed, which nothing else ever deletes. A newer owner's
// pieces, which its manifest may be about to name, are left alone. It
// lists the shard's keys (ListShardKeys, or ListKeys on a store without
// it; within timeout), so the Checkpointer asks once per manifest it
// reads (a restore, a restart); a failed listing finds nothing and is
// logged.
func (r shardRecords) orphans(ctx context.Context, epoch Epoch, id CheckpointID, runs []ManifestRun, timeout time.Duration, log *slog.Logger) []string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var keys [][]byte
	var err error
	if l, ok := r.store.(ShardKeyLister); ok {
		keys, err = l.ListShardKeys(ctx, r.shard)
	} else {
		keys, err = r.store.ListKeys(ctx)
	}
	if err != nil {
		log.Debug("list pieces to sweep", "shard", r.shard, "err", err)
		return nil
	}
	named := map[string]bool{}
	for _, run := range runs {
		for _, pc := range run.Pieces {
			named[pc.Key] = true
		}
	}
	var out []string
	for _, k := range keys {
		e, i, ok := r.parsePieceKey(k)
		if ok && !named[string(k)] && (e < epoch || e == epoch && i <= id) {
			out = append(out, string(k))
		}
	}
	return out
}

// parsePieceKey returns the epoch and checkpoint of one of the shard's
// piece keys (pieceKey), or false for any other key.
func (r shardRecords) parsePieceKey(key []byte) (Epoch, CheckpointID, bool) {
	rest, ok := bytes.CutPrefix(key, []byte(r.shard+"/piece/"))
	if !ok {
		return 0, 0, false
	}
	f := bytes.Split(rest, []byte("/"))
	if len(f) != 3 || !decimal(f[0]) || !decimal(f[1]) || !decimal(f[2]) {
		return 0, 0, false
	}
	e, err1 := strconv.ParseUint(string(f[0]), 10, 64)
	i, err2 := strconv.ParseUint(string(f[1]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return Epoch(e), CheckpointID(i), true
}

// recordWriter writes the records of one or more shards to one StateStore
// in SaveBatch calls of about limit bytes. Before each call it asks every
// shard with records in the batch whether it may still write (its fence);
// a shard that may not loses its records from the batch and fails, the
// others are written. A failed call fails every shard in it.
type recordWriter struct {
	store StateStore
	limit int
	items []KeyedSnapshot
	from  []*groupShard // the shard of each item
	size  int
}

// add queues rec for s, flushing when the batch is full. It returns s's
// error, so the producer of a failed shard stops.
func (w *recordWriter) add(ctx context.Context, s *groupShard, rec KeyedSnapshot) error {
	if s.err != nil {
		return s.err
	}
	w.items = append(w.items, rec)
	w.from = append(w.from, s)
	w.size += len(rec.Snapshot.Data)
	if w.size >= w.limit {
		w.flush(ctx)
	}
	if s.err != nil {
		return s.err
	}
	return ctx.Err()
}

// flush writes the queued records.
func (w *recordWriter) flush(ctx context.Context) {
	if len(w.items) == 0 {
		return
	}
	items, from := w.items[:0], w.from[:0]
	size := 0
	for i, s := range w.from {
		if s.err == nil && !s.fenced {
			s.fenced = true
			if err := s.c.checkOwner(StageSaveState, s.p.id, s.p.epoch); err != nil {
				s.err = err
			}
		}
		if s.err != nil {
			continue
		}
		items = append(items, w.items[i])
		from = append(from, s)
		size += len(w.items[i].Snapshot.Data)
	}
	for _, s := range from {
		s.fenced = false
	}
	if len(items) > 0 {
		if err := w.store.SaveBatch(ctx, items); err != nil {
			err = fmt.Errorf("save %d records (%d bytes): %w", len(items), size, err)
			for _, s := range from {
				if s.err == nil {
					s.err = err
				}
			}
		}
	}
	clear(w.items)
	clear(w.from)
	w.items, w.from, w.size = w.items[:0], w.from[:0], 0
}

// groupShard is one shard's progress through a group save.
type groupShard struct {
	c       *Checkpointer
	p       *pendingCheckpoint
	meta    SnapshotMeta
	err     error
	fenced  bool     // its fence was checked for the batch being flushed
	written []string // piece keys queued or written
	bytes   int64
	runs    []ManifestRun
	garbage []string // pieces of runs a merge replaced
}

// writeRun queues the pieces produce emits as one run of s's checkpoint,
// numbered from first.
func (s *groupShard) writeRun(ctx context.Context, w *recordWriter, first int,
	produce func(context.Context, func([]byte) error) error) (ManifestRun, error) {
	rec := shardRecords{s.c.shard, s.c.store}
	run := ManifestRun{ID: s.p.id}
	n := first
	err := produce(ctx, func(piece []byte) error {
		key := rec.pieceKey(s.p.epoch, s.p.id, n)
		n++
		data := append([]byte(nil), piece...)
		s.written = append(s.written, key)
		s.bytes += int64(len(data))
		run.Pieces = append(run.Pieces, ManifestPiece{Key: key, Size: int64(len(data))})
		return w.add(ctx, s, KeyedSnapshot{Key: []byte(key), Snapshot: Snapshot{Meta: s.meta, Data: data}})
	})
	if err == nil {
		err = s.err
	}
	return run, err
}

// commitManifests fences and writes the manifests of the shards in group
// that are still without error, in one SaveIfUnchanged on a
// ConditionalSaver, else in one SaveBatch (a single Save for one shard).
// A manifest is each shard's own commit point; when the call fails none
// is known to have landed and each shard re-reads its manifest before its
// next checkpoint.
func commitManifests(ctx context.Context, store StateStore, group []*groupShard) {
	var items []ConditionalSave
	var ok []*groupShard
	for _, s := range group {
		if s.err != nil {
			continue
		}
		c, p := s.c, s.p
		read, err := s.fenceManifest(ctx)
		if err != nil {
			s.err = err
			continue
		}
		if err := c.checkOwner(StageSaveState, p.id, p.epoch); err != nil {
			s.err = err
			continue
		}
		m := Manifest{ID: p.id, Epoch: p.epoch, Runs: s.runs}
		items = append(items, ConditionalSave{KeyedSnapshot: c.records().manifestRecord(m, s.meta), Read: read})
		ok = append(ok, s)
	}
	var refused []error
	var err error
	if cs, isCS := store.(ConditionalSaver); isCS && len(items) > 0 {
		refused, err = cs.SaveIfUnchanged(ctx, items)
	} else if len(items) == 1 {
		err = store.Save(ctx, items[0].Key, items[0].Snapshot)
	} else if len(items) > 1 {
		recs := make([]KeyedSnapshot, len(items))
		for i, it := range items {
			recs[i] = it.KeyedSnapshot
		}
		err = store.SaveBatch(ctx, recs)
	}
	for i, s := range ok {
		serr := err
		if err == nil && refused != nil {
			serr = refused[i] // a refusal: nothing of it landed
		} else if err != nil {
			// The manifest may or may not have landed (a timeout after
			// the write): keep the pieces.
			s.p.landed = true
		}
		if serr == nil {
			s.bytes += int64(len(items[i].Snapshot.Data))
			continue
		}
		// Forget the cached manifest so the next stage re-reads it.
		s.c.manifestLoaded = false
		s.err = fmt.Errorf("save manifest %q: %w", items[i].Key, serr)
		if errors.Is(serr, ErrConflict) {
			// Another writer committed the manifest since the fence read
			// it: a newer owner's commit fences this one.
			var notOwner *NotOwnerError
			if _, ferr := s.fenceManifest(ctx); errors.As(ferr, &notOwner) {
				s.err = ferr
			}
		}
	}
}

// fenceManifest fences s's checkpoint against a newer owner that already
// committed (a NotOwnerError): a zombie's manifest must not replace its.
// It returns the manifest record it read (nil: none is stored), on which
// the manifest's save is conditional — a ConditionalSaver's
// SaveIfUnchanged, the S3 store's If-Match on the ETag it read — so a
// newer owner that commits between the read and the save refuses the
// save too. The fence reads the stored manifest, not a store's cache of
// it (the S3 store's): a zombie's cache predates the newer owner's
// commit.
func (s *groupShard) fenceManifest(ctx context.Context) (*Snapshot, error) {
	c, p := s.c, s.p
	rec := c.records()
	if err := rec.refresh(ctx); err != nil {
		return nil, err
	}
	_, stored, err := rec.readManifest(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case stored.Meta.Epoch > p.epoch:
		cur, owns := c.cfg.ownership.Owner()
		return nil, &NotOwnerError{Shard: c.shard, Checkpoint: p.id, Epoch: p.epoch, CurrentEpoch: max(cur, stored.Meta.Epoch), Owns: owns, Stage: StageSaveState}
	}
	return &stored, nil
}

// The keys a Checkpointer writes to its StateStore, for shard S:
//
//	S/manifest                      the checkpoint manifest (the commit point)
//	S/piece/<epoch>/<id>/<n>        piece n of the run checkpoint id wrote at epoch
//
// Every key of a shard starts with the shard's name, so a store can keep
// each shard's keys apart — its own commit point per shard — with
// CheckpointKeyShard.

// CheckpointManifestKey is the key of shard's checkpoint manifest.
func CheckpointManifestKey(shard string) []byte { return []byte(shard + "/manifest") }

// CheckpointPieceKey is the key of piece n of the run checkpoint id wrote
// at epoch.
func CheckpointPieceKey(shard string, epoch Epoch, id CheckpointID, n int) string {
	return shard + "/piece/" + strconv.FormatUint(uint64(epoch), 10) + "/" +
		strconv.FormatUint(uint64(id), 10) + "/" + strconv.Itoa(n)
}

// CheckpointKeyShard returns the shard a Checkpointer's key belongs to
// (the inverse of CheckpointManifestKey and CheckpointPieceKey), or false
// for a key of any other form.
func CheckpointKeyShard(key []byte) (string, bool) {
	if shard, ok := bytes.CutSuffix(key, []byte("/manifest")); ok && len(shard) > 0 {
		return string(shard), true
	}
	// S/piece/<epoch>/<id>/<n>: three decimal fields from the right.
	rest := key
	for range 3 {
		i := bytes.LastIndexByte(rest, '/')
		if i < 0 || !decimal(rest[i+1:]) {
			return "", false
		}
		rest = rest[:i]
	}
	if shard, ok := bytes.CutSuffix(rest, []byte("/piece")); ok && len(shard) > 0 {
		return string(shard), true
	}
	return "", false
}

// decimal reports a non-empty run of ASCII digits.
func decimal(b []byte) bool {
	if len(b) == 0 || len(b) > 20 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
