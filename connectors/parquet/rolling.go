package parquet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/streaming"
)

// RollingWriter writes one shard's derived signals into large archive
// files, exactly once, in step with the shard's checkpoints. It is the
// archive half of a two-phase sink, modelled on Flink's FileSink:
//
//   - in progress: rows go into one open file per shard, built in a
//     hidden upload (StagingPrefix) one row group at a time and uploaded
//     in parts. The file is finished ("sealed") when it reaches the
//     target size (WithTargetFileSize) or age (WithMaxFileAge), checked
//     between records and at every cut, never at every checkpoint.
//   - pending: at a checkpoint's cut, PreCommit makes every row up to the
//     cut durable: it uploads what it must and writes a pre-commit
//     record, from which the files can be finished exactly as they
//     stood at the cut. Sealed files wait here, fully uploaded.
//   - committed: once the checkpoint's state is committed, Commit
//     publishes the files sealed at or before its cut (completes the
//     upload and moves the file to its FileKey name). Nothing is visible
//     to readers before that.
//
// After a crash the next owner calls Restore with the cut and epoch of
// the checkpoint it restored: files sealed by then are published, the
// open file is finished as it stood at the cut and published, and every
// row past the cut (later uploads, records, parts) is discarded. The
// source then replays from after the cut, so no row is lost and none is
// written twice, and the names stay a function of the rows: (pipeline,
// shard, epoch that opened the file, first and last offset).
//
// Call order per shard: Restore (once, before the first Append, when the
// shard is assigned), then Append as records are processed, PreCommit at
// each checkpoint's cut and Commit after that checkpoint's state
// committed (a Commit covers every earlier cut; a lost Commit is made up
// by the next one or by Restore). The archive must implement Uploader,
// Mover and Deleter (LocalArchive, MemArchive and the S3 archive do).
//
// A RollingWriter belongs to one shard owner at one epoch and is used by
// one goroutine.
type RollingWriter struct {
	arc      Archive
	up       Uploader
	mv       Mover
	del      Deleter
	pipeline string
	shard    int32
	epoch    streaming.Epoch
	cfg      writerConfig

	b      *fileBuilder // the open file's encoder
	rowEnc *fileBuilder // encoder of a record's tail rows
	open   *inProgress
	sealed []*sealedFile
	buf    []Row // rows of the open file not yet in a row group

	lastOff  int64 // offset of the last row appended
	lastCut  int64 // cut of the last PreCommit
	restored bool
	roll     bool // finish the open file at the next PreCommit

	cutRows, cutBytes int64      // since the last PreCommit
	uncommitted       []CutStats // pre-committed, not yet reported by a Commit
	records           []int64    // cuts of the records this writer wrote and has not deleted
	obsolete          []string   // segments nothing restores from any more, not yet deleted
	// Tail segments of bytes uploaded since (or of a sealed file): retiring
	// until the next record is written, retired with its cut: a restore
	// to a record at or after that cut needs none of them.
	retiring []string
	retired  []retiredTail
}

type retiredTail struct {
	cut   int64
	names []string
}

type inProgress struct {
	uploadInfo
	epoch    streaming.Epoch
	openedAt time.Time
	pending  []byte // encoded bytes not yet uploaded
	segEnds  []int  // ends of the row-group segments written (openInfo.Segments)
	// tailEnds are the ends of the tail segments written since the last
	// part (openInfo.TailSegments), named tailNames.
	tailEnds  []int64
	tailNames []string
}

type sealedFile struct {
	uploadInfo
	key      FileKey
	rows     int64
	size     int64
	pending  []byte   // bytes not yet uploaded (the last part)
	sealedAt int64    // cut of the first record that lists it; -1 before
	segments []string // its row-group segments, deleted once it is published
}

// CutStats reports what a PreCommit made durable.
type CutStats struct {
	Cut int64 `json:"cut"`
	// Rows appended since the previous cut, durable now.
	Rows int64 `json:"rows"`
	// Bytes written to the archive for them (parts and the record).
	Bytes int64 `json:"bytes"`
}

// CommitStats reports what a Commit committed: the rows and bytes of the
// cuts it covers (not reported by an earlier Commit), and the files it
// published.
type CommitStats struct {
	Cut       int64     `json:"cut"`
	Rows      int64     `json:"rows"`
	Bytes     int64     `json:"bytes"`
	Files     []FileKey `json:"files,omitempty"`
	FileRows  int64     `json:"file_rows"`
	FileBytes int64     `json:"file_bytes"`
}

// RestorePoint is the checkpoint a shard was restored from: its cut (the
// offset of the last record it covers; -1 for none) and the epoch of the
// owner that took it (streaming.SnapshotMeta.Epoch).
type RestorePoint struct {
	Cut   int64           `json:"cut"`
	Epoch streaming.Epoch `json:"epoch"`
}

// RestoreStats reports what Restore published and dropped.
type RestoreStats struct {
	Files []FileKey `json:"files,omitempty"`
	Rows  int64     `json:"rows"`
	Bytes int64     `json:"bytes"`
	// Discarded counts the records and uploads of cuts past the restore
	// point (or of other owners) that were dropped.
	Discarded int `json:"discarded"`
}

// NewRollingWriter returns the writer of pipeline's shard at epoch into a.
// Options: WithTargetFileSize, WithMaxFileAge, WithRowGroupRows,
// WithZstdLevel, WithPartSize, WithClock.
func NewRollingWriter(a Archive, pipeline string, shard int32, epoch streaming.Epoch, opts ...WriterOption) (*RollingWriter, error) {
	if a == nil {
		return nil, errors.New("rolling writer: nil archive")
	}
	up, ok1 := a.(Uploader)
	mv, ok2 := a.(Mover)
	del, ok3 := a.(Deleter)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("rolling writer: archive %T cannot upload in parts, move and delete objects (Uploader, Mover, Deleter)", a)
	}
	cfg, err := newWriterConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := (FileKey{Pipeline: pipeline, Shard: shard, Epoch: epoch}).Validate(); err != nil {
		return nil, fmt.Errorf("rolling writer: %w", err)
	}
	return &RollingWriter{
		arc: a, up: up, mv: mv, del: del, pipeline: pipeline, shard: shard, epoch: epoch, cfg: cfg,
		b: newFileBuilder(cfg), rowEnc: newFileBuilder(cfg),
		lastOff: -1, lastCut: -1,
	}, nil
}

func (w *RollingWriter) where() string { return ShardPrefix(w.pipeline, w.shard) }

// Append takes rows (in source order, every offset after the last cut)
// into the open file, opening one if needed, and first finishes the open
// file when it is due (size or age) and rows[0] starts a new offset. Rows
// are always taken once they pass the order and size checks (ErrRowOrder,
// ErrRowTooLarge); an error then reports a failed upload, which the next
// Append or PreCommit retries.
func (w *RollingWriter) Append(ctx context.Context, rows ...Row) error {
	if len(rows) == 0 {
		return nil
	}
	prev := w.lastOff
	for i, r := range rows {
		if r.Offset < prev {
			return fmt.Errorf("rolling writer %s: row %d has offset %d after offset %d: rows must be in source order: %w", w.where(), i, r.Offset, prev, ErrRowOrder)
		}
		if r.Offset <= w.lastCut {
			return fmt.Errorf("rolling writer %s: row %d has offset %d, at or before the last cut %d: %w", w.where(), i, r.Offset, w.lastCut, ErrRowOrder)
		}
		if err := checkRowSize(i, r); err != nil {
			return fmt.Errorf("rolling writer %s: %w", w.where(), err)
		}
		prev = r.Offset
	}
	var errs []error
	if w.open != nil && rows[0].Offset != w.lastOff && w.due() {
		errs = append(errs, w.seal(ctx))
	}
	if w.open == nil {
		w.startFile(rows[0].Offset)
	}
	w.buf = append(w.buf, rows...)
	w.lastOff = prev
	w.cutRows += int64(len(rows))
	if int64(len(w.buf)) >= w.cfg.rowGroupRows {
		if err := w.encode(); err != nil {
			return fmt.Errorf("rolling writer %s: %w", w.where(), err)
		}
		errs = append(errs, w.uploadOpen(ctx, max(w.cfg.partSize, w.up.MinPartSize())))
	}
	return errors.Join(errs...)
}

// Heavy reports whether appending n rows (starting a new offset) would
// encode a row group or finish the open file, not only buffer them: the
// archive sink hands such appends to a goroutine of their own.
func (w *RollingWriter) Heavy(n int) bool {
	return int64(len(w.buf)+n) >= w.cfg.rowGroupRows || (w.open != nil && w.due())
}

// Roll makes the next PreCommit finish the open file whatever its size
// and age, so the Commit after it publishes every row. Call it before the
// last checkpoint of a shard (revoke, shutdown), so the next owner has no
// file to finish.
func (w *RollingWriter) Roll() { w.roll = true }

// due reports whether the open file should be finished. The file's size
// counts its encoded bytes, uploaded or pending.
func (w *RollingWriter) due() bool {
	return w.roll || w.b.state().Size >= w.cfg.targetFileSize ||
		w.cfg.now().Sub(w.open.openedAt) >= w.cfg.maxFileAge
}

func (w *RollingWriter) startFile(first int64) {
	w.open = &inProgress{
		uploadInfo: uploadInfo{Staging: inProgressName(w.pipeline, w.shard, first, w.epoch)},
		epoch:      w.epoch,
		openedAt:   w.cfg.now(),
		pending:    append([]byte(nil), w.b.start()...),
	}
}

// encode turns the buffered rows into row groups of the open file.
func (w *RollingWriter) encode() error {
	if len(w.buf) == 0 {
		return nil
	}
	body, err := w.b.appendRows(w.buf)
	if err != nil {
		return err
	}
	w.open.pending = append(w.open.pending, body...)
	clear(w.buf)
	w.buf = w.buf[:0]
	return nil
}

// upload uploads *pending as the next part of u when it holds at least
// threshold bytes, creating the upload first if needed.
func (w *RollingWriter) upload(ctx context.Context, u *uploadInfo, pending *[]byte, threshold int64) error {
	n, err := uploadPending(ctx, w.up, u, pending, threshold)
	if err != nil {
		return fmt.Errorf("rolling writer %s: %w", w.where(), err)
	}
	w.cutBytes += n
	return nil
}

// uploadOpen uploads the open file's pending bytes as its next part when
// they hold at least threshold bytes; its tail segments then retire.
func (w *RollingWriter) uploadOpen(ctx context.Context, threshold int64) error {
	o := w.open
	before, _ := partsEnd(o.Parts)
	err := w.upload(ctx, &o.uploadInfo, &o.pending, threshold)
	if after, _ := partsEnd(o.Parts); after > before {
		w.retireTail(o)
	}
	return err
}

// retireTail retires o's tail segments: their bytes are uploaded.
func (w *RollingWriter) retireTail(o *inProgress) {
	w.retiring = append(w.retiring, o.tailNames...)
	o.tailEnds, o.tailNames = nil, nil
}

// uploadPending uploads *pending as the next part of u when it holds at
// least threshold bytes (and any bytes at all), creating the upload first
// if needed, and returns how many bytes it uploaded.
func uploadPending(ctx context.Context, up Uploader, u *uploadInfo, pending *[]byte, threshold int64) (int64, error) {
	if len(*pending) == 0 || int64(len(*pending)) < threshold {
		return 0, nil
	}
	if u.UploadID == "" {
		id, err := up.CreateUpload(ctx, u.Staging)
		if err != nil {
			return 0, err
		}
		u.UploadID = id
	}
	end, _ := partsEnd(u.Parts)
	p, err := up.UploadPart(ctx, u.Staging, u.UploadID, len(u.Parts)+1, end, *pending)
	if err != nil {
		return 0, err
	}
	u.Parts = appendPart(up, u.Parts, p)
	*pending = (*pending)[:0]
	return p.Size, nil
}

// seal finishes the open file (last row group, footer) and moves it to
// the sealed files; its last part is uploaded now or by PreCommit.
func (w *RollingWriter) seal(ctx context.Context) error {
	if err := w.encode(); err != nil {
		return fmt.Errorf("rolling writer %s: %w", w.where(), err)
	}
	tail, err := w.b.footer()
	if err != nil {
		return fmt.Errorf("rolling writer %s: %w", w.where(), err)
	}
	o := w.open
	st := w.b.state()
	w.roll = false
	sf := &sealedFile{
		uploadInfo: o.uploadInfo,
		key:        FileKey{Pipeline: w.pipeline, Shard: w.shard, Epoch: o.epoch, First: st.First, Last: st.Last},
		rows:       st.Rows, size: st.Size,
		pending:  append(o.pending, tail...),
		sealedAt: -1,
		segments: segmentNames(o.Staging, 0, o.segEnds),
	}
	w.sealed = append(w.sealed, sf)
	w.retireTail(o)
	w.open = nil
	return w.upload(ctx, &sf.uploadInfo, &sf.pending, 0)
}

// PreCommit makes every row appended so far durable for the checkpoint
// whose cut is cut (the offset of the last record it covers): it
// finishes the open file if it is due, uploads the sealed files' last
// parts, and writes the pre-commit record of the cut. Call it from the
// checkpoint, before the state is saved; on error the checkpoint must
// fail (the rows stay in the writer, and a later PreCommit retries).
func (w *RollingWriter) PreCommit(ctx context.Context, cut int64) (CutStats, error) {
	if cut < w.lastOff || cut < w.lastCut {
		return CutStats{}, fmt.Errorf("rolling writer %s: cut %d is before the last row appended (%d) or the last cut (%d)", w.where(), cut, w.lastOff, w.lastCut)
	}
	if w.open != nil && w.due() {
		if err := w.seal(ctx); err != nil {
			return CutStats{}, err
		}
	}
	for _, sf := range w.sealed {
		if err := w.upload(ctx, &sf.uploadInfo, &sf.pending, 0); err != nil {
			return CutStats{}, err
		}
	}
	if w.open != nil {
		if int64(len(w.buf)) >= max(w.cfg.rowGroupRows/8, 1) {
			if err := w.encode(); err != nil {
				return CutStats{}, fmt.Errorf("rolling writer %s: %w", w.where(), err)
			}
		}
		if err := w.uploadOpen(ctx, w.up.MinPartSize()); err != nil {
			return CutStats{}, err
		}
	}
	if w.open != nil {
		if err := w.writeSegment(ctx); err != nil {
			return CutStats{}, err
		}
		if err := w.writeTail(ctx); err != nil {
			return CutStats{}, err
		}
	}
	if w.open != nil || len(w.sealed) > 0 {
		data, err := w.record(cut)
		if err != nil {
			return CutStats{}, fmt.Errorf("rolling writer %s: pre-commit record of cut %d: %w", w.where(), cut, err)
		}
		if err := w.arc.PutAtomic(ctx, recordName(w.pipeline, w.shard, cut, w.epoch), data); err != nil {
			return CutStats{}, fmt.Errorf("rolling writer %s: pre-commit record of cut %d: %w", w.where(), cut, err)
		}
		if n := len(w.records); n == 0 || w.records[n-1] != cut {
			w.records = append(w.records, cut)
		}
		w.cutBytes += int64(len(data))
		if len(w.retiring) > 0 {
			w.retired = append(w.retired, retiredTail{cut: cut, names: w.retiring})
			w.retiring = nil
		}
	}
	for _, sf := range w.sealed {
		if sf.sealedAt < 0 {
			sf.sealedAt = cut
		}
	}
	st := CutStats{Cut: cut, Rows: w.cutRows, Bytes: w.cutBytes}
	if n := len(w.uncommitted); n > 0 && w.uncommitted[n-1].Cut == cut {
		w.uncommitted[n-1].Rows += st.Rows
		w.uncommitted[n-1].Bytes += st.Bytes
	} else {
		w.uncommitted = append(w.uncommitted, st)
	}
	w.cutRows, w.cutBytes = 0, 0
	w.lastCut = cut
	return st, nil
}

// writeSegment writes the open file's row groups added since its last
// row-group segment as a new segment.
func (w *RollingWriter) writeSegment(ctx context.Context) error {
	o := w.open
	rgs := w.b.state().RowGroups
	from := 0
	if n := len(o.segEnds); n > 0 {
		from = o.segEnds[n-1]
	}
	if w.cfg.inlineRowGroups || len(rgs) == from {
		return nil
	}
	data, err := encodeSegment(rgs[from:])
	if err == nil {
		err = w.arc.PutAtomic(ctx, segmentName(o.Staging, from, len(rgs)), data)
	}
	if err != nil {
		return fmt.Errorf("rolling writer %s: row groups %d-%d of %s: %w", w.where(), from, len(rgs), o.Staging, err)
	}
	o.segEnds = append(o.segEnds, len(rgs))
	w.cutBytes += int64(len(data))
	return nil
}

// writeTail writes the open file's pending bytes (encoded, too few for a
// part) not yet in a tail segment as a new tail segment. Without it each
// record would carry them all again: up to a part's worth (S3: 5 MiB) at
// every checkpoint.
func (w *RollingWriter) writeTail(ctx context.Context) error {
	o := w.open
	start, from := o.tailFrom()
	end := start + int64(len(o.pending))
	if w.cfg.inlineRowGroups || end <= from {
		return nil
	}
	name := tailSegmentName(o.Staging, from, end)
	data := encodeTailSegment(o.pending[from-start:])
	if err := w.arc.PutAtomic(ctx, name, data); err != nil {
		return fmt.Errorf("rolling writer %s: bytes %d-%d of %s: %w", w.where(), from, end, o.Staging, err)
	}
	o.tailEnds = append(o.tailEnds, end)
	o.tailNames = append(o.tailNames, name)
	w.cutBytes += int64(len(data))
	return nil
}

// tailFrom returns where the pending bytes start in the file (the end of
// the parts) and where the bytes in no tail segment start.
func (o *inProgress) tailFrom() (start, from int64) {
	start, _ = partsEnd(o.Parts)
	from = start
	if n := len(o.tailEnds); n > 0 {
		from = o.tailEnds[n-1]
	}
	return start, from
}

// segmentNames names the row-group segments of staging with ends, the
// first starting at from.
func segmentNames(staging string, from int, ends []int) []string {
	names := make([]string, len(ends))
	for i, end := range ends {
		names[i] = segmentName(staging, from, end)
		from = end
	}
	return names
}

// record encodes the pre-commit record of cut.
func (w *RollingWriter) record(cut int64) ([]byte, error) {
	rec := &record{recordHeader: recordHeader{Pipeline: w.pipeline, Shard: w.shard, Epoch: uint64(w.epoch), Cut: cut}}
	for _, sf := range w.sealed {
		rec.Sealed = append(rec.Sealed, sealedInfo{uploadInfo: sf.uploadInfo, Name: sf.key.Name(), Rows: sf.rows, Size: sf.size, SealedAt: sf.sealedAt})
	}
	if o := w.open; o != nil {
		st := w.b.state()
		rec.Open = &openInfo{uploadInfo: o.uploadInfo, Epoch: uint64(o.epoch), Size: st.Size, CRC: st.CRC, Rows: st.Rows, First: st.First, Last: st.Last, Segments: o.segEnds}
		if w.cfg.inlineRowGroups {
			rgs, err := encodeRowGroups(st.RowGroups)
			if err != nil {
				return nil, err
			}
			rec.Open.RowGroups = rgs
		}
		start, from := o.tailFrom()
		rec.Open.TailSegments = o.tailEnds
		rec.tailBytes = o.pending[from-start:]
		rec.tailRows = w.buf
	}
	return encodeRecord(rec, w.rowEnc)
}

// Commit publishes the files sealed at or before cut, once the checkpoint
// of that cut has committed its state, and reports the rows and bytes of
// the cuts it covers. It also deletes pre-commit records older than the
// newest one at or before cut, and that one too once nothing is open or
// sealed (its files are all published: a Restore at cut has nothing to
// finish, and compaction may merge and delete those files before the
// shard's next owner restores). On error, the files not yet published
// stay sealed and the next Commit (or Restore) publishes them.
func (w *RollingWriter) Commit(ctx context.Context, cut int64) (CommitStats, error) {
	st := CommitStats{Cut: cut}
	retired := w.retired[:0]
	for _, r := range w.retired {
		if r.cut <= cut {
			w.obsolete = append(w.obsolete, r.names...)
		} else {
			retired = append(retired, r)
		}
	}
	w.retired = retired
	keep := w.uncommitted[:0]
	for _, c := range w.uncommitted {
		if c.Cut <= cut {
			st.Rows += c.Rows
			st.Bytes += c.Bytes
		} else {
			keep = append(keep, c)
		}
	}
	w.uncommitted = keep
	for len(w.sealed) > 0 && w.sealed[0].sealedAt >= 0 && w.sealed[0].sealedAt <= cut {
		sf := w.sealed[0]
		if err := w.publish(ctx, sf.uploadInfo, sf.key.Name()); err != nil {
			return st, err
		}
		w.sealed = w.sealed[1:]
		w.obsolete = append(w.obsolete, sf.segments...)
		st.Files = append(st.Files, sf.key)
		st.FileRows += sf.rows
		st.FileBytes += sf.size
	}
	return st, w.dropRecords(ctx, cut, len(st.Files) > 0, w.open == nil && len(w.sealed) == 0)
}

// publish completes a file's upload and moves it to its name. Both steps
// are idempotent: an upload completed before, or a file moved before, is
// not an error.
func (w *RollingWriter) publish(ctx context.Context, u uploadInfo, name string) error {
	if err := completeUpload(ctx, w.up, u); err != nil {
		return fmt.Errorf("rolling writer %s: publish %s: %w", w.where(), name, err)
	}
	if err := w.mv.Move(ctx, u.Staging, name); err != nil {
		return fmt.Errorf("rolling writer %s: publish %s: %w", w.where(), name, err)
	}
	return nil
}

// completeUpload completes u. An upload not found is not an error: it
// was completed already (before a crash, or by the first try of this call
// when its reply was lost and the SDK retried), or aborted, and the Move
// that follows finds the finished object or says that neither exists.
func completeUpload(ctx context.Context, up Uploader, u uploadInfo) error {
	if err := up.CompleteUpload(ctx, u.Staging, u.UploadID, u.Parts); err != nil && !errors.Is(err, ErrUploadNotFound) {
		return err
	}
	return nil
}

// dropRecords deletes the records older than the newest at or before
// cut (all of them at or before cut, when all) and the row-group segments
// of published files, in one batch once a few records gathered (or now,
// when force or all).
func (w *RollingWriter) dropRecords(ctx context.Context, cut int64, force, all bool) error {
	i, _ := slices.BinarySearch(w.records, cut+1) // records[:i] are at or before cut
	old := max(i-1, 0)
	if all {
		old = i
	}
	if (old == 0 && len(w.obsolete) == 0) || (old < 4 && !force && !all) {
		return nil
	}
	names := make([]string, 0, old+len(w.obsolete))
	for _, c := range w.records[:old] {
		names = append(names, recordName(w.pipeline, w.shard, c, w.epoch))
	}
	names = append(names, w.obsolete...)
	if err := w.del.Delete(ctx, names...); err != nil {
		return fmt.Errorf("rolling writer %s: delete %d old pre-commit records and %d row-group segments: %w", w.where(), old, len(w.obsolete), err)
	}
	w.records = append(w.records[:0], w.records[old:]...)
	w.obsolete = w.obsolete[:0]
	return nil
}

// Restore brings the shard's archive to the checkpoint at: files sealed by
// its cut are published, the file open at its cut is finished as it stood
// then and published, and everything later (records, uploads, parts of
// this or any other owner) is discarded. Call it once, when the shard is
// assigned and before the first Append; records of the owner at.Epoch are
// the ones trusted. Restore is idempotent: a crash inside it is repaired
// by calling it again.
func (w *RollingWriter) Restore(ctx context.Context, at RestorePoint) (RestoreStats, error) {
	if w.restored || w.lastOff >= 0 || w.lastCut >= 0 {
		return RestoreStats{}, fmt.Errorf("rolling writer %s: Restore must come first, once", w.where())
	}
	prefix := StagingPrefix(w.pipeline, w.shard)
	objs, err := w.arc.List(ctx, prefix)
	if err != nil {
		return RestoreStats{}, fmt.Errorf("rolling writer %s: restore: %w", w.where(), err)
	}
	best, bestCut := "", int64(-1)
	for _, o := range objs {
		cut, epoch, ok := parseRecordName(strings.TrimPrefix(o.Name, prefix))
		if ok && epoch == at.Epoch && cut <= at.Cut && cut >= bestCut {
			best, bestCut = o.Name, cut
		}
	}
	var st RestoreStats
	keptNames := map[string]bool{} // staging objects finished from the record
	keptIDs := map[string]bool{}   // and their uploads
	var rec *record
	if best != "" {
		rec, err = w.readRecord(ctx, best)
		if err != nil {
			return RestoreStats{}, fmt.Errorf("rolling writer %s: restore to cut %d: %w", w.where(), at.Cut, err)
		}
		for _, s := range rec.Sealed {
			k, _ := ParseFileName(s.Name)
			if err := w.publish(ctx, s.uploadInfo, s.Name); err != nil {
				// Neither staged nor published: the record's own Commit
				// published it (the record stays while a file is open,
				// to finish that one) and compaction merged it into a
				// file covering its offsets, then deleted it.
				if !errors.Is(err, ErrNotFound) {
					return RestoreStats{}, err
				}
				ok, cerr := w.covered(ctx, k)
				if cerr != nil {
					return RestoreStats{}, errors.Join(err, cerr)
				}
				if !ok {
					return RestoreStats{}, fmt.Errorf("%w; no published file covers its offsets %d-%d", err, k.First, k.Last)
				}
				continue
			}
			st.Files = append(st.Files, k)
			st.Rows += s.Rows
			st.Bytes += s.Size
			keptNames[s.Staging], keptIDs[s.UploadID] = true, true
		}
		if rec.Open != nil {
			key, id, size, err := w.finish(ctx, rec)
			if err != nil {
				return RestoreStats{}, err
			}
			keptNames[rec.Open.Staging], keptIDs[id] = true, true
			if size > 0 {
				st.Files = append(st.Files, key)
				st.Rows += rec.Open.Rows + int64(len(rec.tailRows))
				st.Bytes += size
			}
		}
	}
	// Everything else in the staging folder is past the restore point or
	// of another owner: abort its uploads, delete its objects. So are
	// the uploads under the shard's published names: those of a
	// multipart copy (Move of a file over 5 GiB) a crash interrupted,
	// the files they copied published again from the record or already
	// published. (One of a compaction or an older owner copying right
	// now fails and is retried: the copy's source stays until it is.)
	if ul, ok := w.arc.(UploadLister); ok {
		ups, err := ul.ListUploads(ctx, prefix)
		if err != nil {
			return st, fmt.Errorf("rolling writer %s: restore: %w", w.where(), err)
		}
		copies, err := ul.ListUploads(ctx, ShardPrefix(w.pipeline, w.shard))
		if err != nil {
			return st, fmt.Errorf("rolling writer %s: restore: %w", w.where(), err)
		}
		for _, u := range append(ups, copies...) {
			if keptIDs[u.ID] {
				continue
			}
			if err := w.up.AbortUpload(ctx, u.Name, u.ID); err != nil {
				return st, fmt.Errorf("rolling writer %s: restore: %w", w.where(), err)
			}
			st.Discarded++
		}
	}
	// The row-group and tail segments of the file finished from the record go
	// last, after the record: a Restore repeated after a crash in between
	// finds no record and needs none.
	var drop, segments []string
	for _, o := range objs {
		switch {
		case keptNames[o.Name]:
		case rec != nil && rec.Open != nil && isSegment(o.Name, rec.Open.Staging):
			segments = append(segments, o.Name)
		default:
			drop = append(drop, o.Name)
			if o.Name != best {
				st.Discarded++
			}
		}
	}
	for _, names := range [][]string{drop, segments} {
		if err := w.del.Delete(ctx, names...); err != nil {
			return st, fmt.Errorf("rolling writer %s: restore: %w", w.where(), err)
		}
	}
	w.restored = true
	w.lastCut, w.lastOff = at.Cut, at.Cut
	return st, nil
}

// covered reports whether a published file of the shard holds k's whole
// offset range (k's own file, or a compaction's output).
func (w *RollingWriter) covered(ctx context.Context, k FileKey) (bool, error) {
	for f, err := range archiveFiles(ctx, w.arc, ShardPrefix(w.pipeline, w.shard), "") {
		if err != nil {
			return false, fmt.Errorf("rolling writer %s: restore: %w", w.where(), err)
		}
		if f.Key.First <= k.First && f.Key.Last >= k.Last {
			return true, nil
		}
	}
	return false, nil
}

func (w *RollingWriter) readRecord(ctx context.Context, name string) (*record, error) {
	data, err := w.readStaged(ctx, "pre-commit record", name)
	if err != nil {
		return nil, err
	}
	return decodeRecord(ctx, name, data)
}

// readStaged reads the whole staging object name (a what), at most
// maxRecordBytes.
func (w *RollingWriter) readStaged(ctx context.Context, what, name string) ([]byte, error) {
	obj, err := w.arc.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	if obj.Size() > maxRecordBytes {
		return nil, fmt.Errorf("%s %s: %d bytes exceeds %d: %w", what, name, obj.Size(), maxRecordBytes, streaming.ErrCorrupt)
	}
	data := make([]byte, obj.Size())
	if n, err := obj.ReadAt(data, 0); n != len(data) {
		return nil, fmt.Errorf("%s %s: read %d of %d bytes: %w", what, name, n, len(data), err)
	}
	return data, nil
}

// rowGroups returns the row groups of the file open in a record: those
// held inline, then those of its segments.
func (w *RollingWriter) rowGroups(ctx context.Context, o *openInfo) ([]format.RowGroup, error) {
	var rgs []format.RowGroup
	if len(o.RowGroups) > 0 {
		var err error
		if rgs, err = decodeRowGroups(o.RowGroups); err != nil {
			return nil, fmt.Errorf("open file %s: row groups: %w: %w", o.Staging, err, streaming.ErrCorrupt)
		}
	}
	return readSegments(ctx, w, o.Staging, "row-group segment", rgs, len(rgs), o.Segments, segmentName, decodeSegment)
}

// tail returns the bytes of the tail segments of the file open in a
// record: its bytes after its parts, but for those the record holds.
func (w *RollingWriter) tail(ctx context.Context, o *openInfo) ([]byte, error) {
	from, _ := partsEnd(o.Parts)
	return readSegments(ctx, w, o.Staging, "tail segment", nil, from, o.TailSegments, tailSegmentName, decodeTailSegment)
}

// readSegments appends to out what the segments (a what) of the open file
// staging hold, read and decoded in order: the first starts at from, each
// ends where ends say.
func readSegments[T any, E int | int64](ctx context.Context, w *RollingWriter, staging, what string, out []T, from E, ends []E,
	name func(string, E, E) string, decode func(string, []byte, E) ([]T, error)) ([]T, error) {
	for _, end := range ends {
		n := name(staging, from, end)
		data, err := w.readStaged(ctx, what, n)
		if err != nil {
			return nil, fmt.Errorf("open file %s: %w", staging, err)
		}
		seg, err := decode(n, data, end-from)
		if err != nil {
			return nil, err
		}
		out = append(out, seg...)
		from = end
	}
	return out, nil
}

// finish finishes and publishes the file open in rec, as it stood at the
// record's cut, and returns its key, its upload id and size. size is 0
// when the file held no row (its upload is aborted instead).
func (w *RollingWriter) finish(ctx context.Context, rec *record) (FileKey, string, int64, error) {
	o := rec.Open
	rgs, err := w.rowGroups(ctx, o)
	if err != nil {
		return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: %w", w.where(), err)
	}
	b := newFileBuilder(w.cfg)
	b.resume(fileState{Size: o.Size, CRC: o.CRC, Rows: o.Rows, First: o.First, Last: o.Last, RowGroups: rgs})
	pending, err := w.tail(ctx, o)
	if err != nil {
		return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: %w", w.where(), err)
	}
	pending = append(pending, rec.tailBytes...)
	if len(rec.tailRows) > 0 {
		body, err := b.appendRows(rec.tailRows)
		if err != nil {
			return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: open file %s: %w", w.where(), o.Staging, err)
		}
		pending = append(pending, body...)
	}
	if b.state().Rows == 0 {
		if o.UploadID != "" {
			if err := w.up.AbortUpload(ctx, o.Staging, o.UploadID); err != nil {
				return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: %w", w.where(), err)
			}
		}
		return FileKey{}, "", 0, nil
	}
	tail, err := b.footer()
	if err != nil {
		return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: open file %s: %w", w.where(), o.Staging, err)
	}
	pending = append(pending, tail...)
	st := b.state()
	key := FileKey{Pipeline: w.pipeline, Shard: w.shard, Epoch: streaming.Epoch(o.Epoch), First: st.First, Last: st.Last}
	u := o.uploadInfo
	u.Parts = slices.Clone(u.Parts)
	if u.UploadID == "" {
		if u.UploadID, err = w.up.CreateUpload(ctx, u.Staging); err != nil {
			return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: %w", w.where(), err)
		}
	}
	end, _ := partsEnd(u.Parts)
	p, err := w.up.UploadPart(ctx, u.Staging, u.UploadID, len(u.Parts)+1, end, pending)
	switch {
	case errors.Is(err, ErrUploadNotFound): // finished by an earlier Restore
	case err != nil:
		return FileKey{}, "", 0, fmt.Errorf("rolling writer %s: %w", w.where(), err)
	default:
		u.Parts = appendPart(w.up, u.Parts, p)
	}
	if err := w.publish(ctx, u, key.Name()); err != nil {
		return FileKey{}, "", 0, err
	}
	return key, u.UploadID, st.Size, nil
}
