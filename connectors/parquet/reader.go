package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/streaming"
)

// Position is a resume point of a backfill: the next row to read is row
// Row (counted from 0, in file order) of archive file File. The zero
// Position is the start of the archive. It is small and JSON-friendly so
// an activity can heartbeat it.
//
// Positions the reader hands out (Entry.Pos and its Next) also locate the
// point by source offset: Seen rows of offset Offset had been read, and
// the files before File cover offsets up to SkipThrough. So a resume
// needs no listing of the earlier files, and still works when File itself
// is gone (compacted into a larger file): the reader then finds the point
// by offset. A Position built by hand ({File, Row}, Seen 0) must name a
// file that exists.
type Position struct {
	File        string `json:"file,omitempty"`
	Row         int64  `json:"row"`
	Offset      int64  `json:"offset,omitempty"`
	Seen        int64  `json:"seen,omitempty"`
	SkipThrough int64  `json:"skip_through,omitempty"`
}

// Next returns the position after p's row.
func (p Position) Next() Position {
	p.Row++
	p.Seen++
	return p
}

// Entry is one row read from the archive and its position.
type Entry struct {
	Row Row
	// Pos is this row's position; resume after it from Pos.Next().
	Pos Position
	// FileSize is the size of the file the row is in, as listed.
	FileSize int64
}

// FileInfo is one file of a read plan.
type FileInfo struct {
	Key  FileKey
	Name string
	Size int64
	// Rows is the file's row count, from its footer.
	Rows int64
	// SkipThrough is the highest source offset earlier files of the same
	// shard already cover; rows at or below it are skipped. -1 for none.
	SkipThrough int64
	// Fingerprint is the schema fingerprint stored in the file.
	Fingerprint string
	// ModTime is when the file was written, as the archive lists it.
	ModTime time.Time
}

// NewBytes is the share of Size that holds the file's offsets above
// SkipThrough, in proportion to its offset range [Key.First, Key.Last]:
// Size when no earlier file covers any of them, 0 when earlier files
// cover them all. Summed over a partition's files it counts each offset's
// bytes about once, however its files overlap: beside its inputs a
// compaction's output adds nothing to them (or they to it), and read
// after some of its inputs were, it adds the share of the offsets they
// did not hold. (Backfill progress measures the work in it.)
func (fi FileInfo) NewBytes() int64 {
	switch {
	case fi.SkipThrough < fi.Key.First:
		return fi.Size
	case fi.Key.Last <= fi.SkipThrough:
		return 0
	}
	span := float64(fi.Key.Last-fi.Key.First) + 1
	return int64(float64(fi.Size) * float64(fi.Key.Last-fi.SkipThrough) / span)
}

// Reader reads an archive prefix for backfills: it plans the files in
// order, refuses any whose schema fingerprint is not the expected one, and
// streams rows one row group at a time with a fixed-size decode batch, so
// memory is bounded by one row group's pages whatever the archive's size.
// A Reader is used by one goroutine.
type Reader struct {
	archive Archive
	prefix  string
	cfg     readerConfig
}

// NewReader returns a reader of the files under prefix (for example
// "iot/" for a whole pipeline or ShardPrefix("iot", 3) for one shard).
func NewReader(a Archive, prefix string, opts ...ReaderOption) (*Reader, error) {
	if a == nil {
		return nil, errors.New("parquet reader: nil archive")
	}
	cfg := defaultReaderConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Reader{archive: a, prefix: prefix, cfg: cfg}, nil
}

// Plan lists the archive and returns the files to read, in read order,
// after checking each file's schema fingerprint (one footer read per
// file). It fails with a *FingerprintError on the first mismatch and with
// an error wrapping ErrBadName for an object whose name is not a FileKey
// name. Hidden names (an element starting with '_' or '.', such as
// StagingDir) are skipped. Of several files with the same shard and
// offset range, only the one of the highest epoch is kept. All and
// Files plan the same way, page by page, without reading footers.
func (r *Reader) Plan(ctx context.Context) ([]FileInfo, error) {
	var plan []FileInfo
	for fi, err := range r.Files(ctx, "", -1) {
		if err != nil {
			return nil, err
		}
		if err := r.inspect(ctx, &fi); err != nil {
			return nil, err
		}
		plan = append(plan, fi)
	}
	return plan, nil
}

// listPage is how many names a Reader lists per request.
const listPage = 1000

// Files plans the archive from the first name after startAfter ("" for
// the start), page by page (ListAfter), without reading any file: the
// files in read order with their SkipThrough, skip being the highest
// offset already covered in the first shard listed (-1 for none). Rows
// and Fingerprint are not filled in (see Plan).
func (r *Reader) Files(ctx context.Context, startAfter string, skip int64) iter.Seq2[FileInfo, error] {
	return func(yield func(FileInfo, error) bool) {
		var held *FileInfo
		cov, shard, first := skip, "", true
		emit := func(fi FileInfo) bool {
			k := ShardPrefix(fi.Key.Pipeline, fi.Key.Shard)
			if !first && k != shard {
				cov = -1
			}
			fi.SkipThrough = cov
			cov, shard, first = max(cov, fi.Key.Last), k, false
			return yield(fi, nil)
		}
		for fi, err := range archiveFiles(ctx, r.archive, r.prefix, startAfter) {
			if err != nil {
				yield(FileInfo{}, fmt.Errorf("parquet reader: %w", err))
				return
			}
			// The listing is sorted by (pipeline, shard, first, last,
			// epoch): a later file with the same range has a higher
			// epoch and wins.
			if held != nil && !sameRange(held.Key, fi.Key) && !emit(*held) {
				return
			}
			held = &fi
		}
		if held != nil {
			emit(*held)
		}
	}
}

// archiveFiles lists the archive's files under prefix after startAfter,
// page by page (ListAfter), in name order, skipping hidden names (the
// archive's working objects). A name that is not a FileKey name is
// yielded as an error wrapping ErrBadName, and the listing goes on if the
// consumer continues; a listing error ends it. SkipThrough is -1.
func archiveFiles(ctx context.Context, a Archive, prefix, startAfter string) iter.Seq2[FileInfo, error] {
	return func(yield func(FileInfo, error) bool) {
		after := startAfter
		for {
			page, err := ListAfter(ctx, a, prefix, after, listPage)
			if err != nil {
				yield(FileInfo{}, err) // says what was listed (ListAfter)
				return
			}
			for _, o := range page {
				after = o.Name
				if hiddenName(o.Name) {
					continue
				}
				k, err := ParseFileName(o.Name)
				if err != nil {
					if !yield(FileInfo{}, err) {
						return
					}
					continue
				}
				if !yield(FileInfo{Key: k, Name: o.Name, Size: o.Size, SkipThrough: -1, ModTime: o.ModTime}, nil) {
					return
				}
			}
			if len(page) < listPage {
				return
			}
		}
	}
}

func sameShard(a, b FileKey) bool { return a.Pipeline == b.Pipeline && a.Shard == b.Shard }

func sameRange(a, b FileKey) bool { return sameShard(a, b) && a.First == b.First && a.Last == b.Last }

// CheckFile opens the named file's footer and checks its schema
// fingerprint (a *FingerprintError on a mismatch) and layout, without
// reading its rows.
func (r *Reader) CheckFile(ctx context.Context, name string) error {
	of, err := r.open(ctx, name, false)
	if err != nil {
		return err
	}
	return of.Close()
}

// inspect reads fi's footer: its row count and its fingerprint.
func (r *Reader) inspect(ctx context.Context, fi *FileInfo) error {
	of, err := r.open(ctx, fi.Name, false)
	if err != nil {
		return err
	}
	defer of.Close()
	fi.Rows = of.f.NumRows()
	fi.Fingerprint, _ = of.f.Lookup(FingerprintKey)
	return nil
}

// openedFile is an open archive file: the object, the window its row
// groups are read through, and parquet-go's view of it.
type openedFile struct {
	obj Object
	win *window
	f   *pq.File
}

func (o *openedFile) Close() error { return o.obj.Close() }

// open opens the named file and checks its fingerprint, both the stored
// one and the one of the schema the file actually has. With verify, it
// first checks the whole-file checksum (reading the file once).
func (r *Reader) open(ctx context.Context, name string, verify bool) (*openedFile, error) {
	obj, err := r.archive.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("parquet reader: %w", err)
	}
	of, err := openChecked(obj, name, r.cfg.expected, verify)
	if err != nil {
		obj.Close()
		return nil, err
	}
	return of, nil
}

// openChecked opens obj (named name in errors) as an archive file whose
// fingerprint must be expected, then, with verify, checks its whole-file
// checksum. The footer is read first (its length and shape bounded, see
// readFooter), so a file of another schema is refused as such.
func openChecked(obj Object, name, expected string, verify bool) (*openedFile, error) {
	win := &window{Object: obj}
	f, err := openFile(win)
	if err != nil {
		return nil, fmt.Errorf("parquet reader: archive file %s: %w", name, err)
	}
	stored, _ := f.Lookup(FingerprintKey)
	if stored != expected {
		return nil, &FingerprintError{File: name, Got: stored, Expected: expected}
	}
	if actual := Fingerprint(f.Schema()); actual != stored {
		return nil, &FingerprintError{File: name + " (schema in the footer)", Got: actual, Expected: expected}
	}
	if verify {
		if err := verifyChecksum(obj); err != nil {
			return nil, fmt.Errorf("parquet reader: archive file %s: %w", name, err)
		}
	}
	return &openedFile{obj: obj, win: win, f: f}, nil
}

// openFile opens a Parquet file after checking its footer's length and
// shape (readFooter), turning a decoder panic (parquet-go panics on some
// corrupt footers) into an error wrapping streaming.ErrCorrupt.
func openFile(obj Object) (f *pq.File, err error) {
	if _, err := readFooter(obj); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, corruptError(p)
		}
	}()
	f, err = pq.OpenFile(obj, obj.Size(), pq.SkipBloomFilters(true), pq.SkipPageIndex(true))
	if err != nil {
		return nil, err
	}
	if err := checkLayout(f, obj.Size()); err != nil {
		return nil, err
	}
	return f, nil
}

// checkLayout checks the footer against itself before any page is
// decoded: every column chunk has the physical type of its schema column,
// a codec the archive writes (zstd, snappy, or none), one value per row (the schema is flat and required), and
// pages inside the file. parquet-go trusts these fields; a corrupt footer
// that lies about them makes it decode garbage.
func checkLayout(f *pq.File, size int64) error {
	md := f.Metadata()
	leaves := f.Schema().Columns()
	var total int64
	for i, rg := range md.RowGroups {
		if len(rg.Columns) != len(leaves) {
			return fmt.Errorf("row group %d has %d column chunks, schema has %d columns: %w", i, len(rg.Columns), len(leaves), streaming.ErrCorrupt)
		}
		if rg.NumRows < 0 {
			return fmt.Errorf("row group %d has %d rows: %w", i, rg.NumRows, streaming.ErrCorrupt)
		}
		total += rg.NumRows
		for j, cc := range rg.Columns {
			leaf, _ := f.Schema().Lookup(leaves[j]...)
			cm := cc.MetaData
			switch {
			case leaf.Node == nil || int8(leaf.Node.Type().Kind()) != int8(cm.Type):
				return fmt.Errorf("row group %d column %d: chunk type %v does not match the schema: %w", i, j, cm.Type, streaming.ErrCorrupt)
			case cm.Codec != format.Zstd && cm.Codec != format.Snappy && cm.Codec != format.Uncompressed:
				return fmt.Errorf("row group %d column %d: codec %v: %w", i, j, cm.Codec, streaming.ErrCorrupt)
			case cm.NumValues != rg.NumRows:
				return fmt.Errorf("row group %d column %d: %d values for %d rows: %w", i, j, cm.NumValues, rg.NumRows, streaming.ErrCorrupt)
			case cm.DataPageOffset < 4 || cm.DataPageOffset >= size || cm.DictionaryPageOffset < 0 || cm.DictionaryPageOffset >= size ||
				cm.TotalCompressedSize < 0 || cm.TotalCompressedSize > size:
				return fmt.Errorf("row group %d column %d: page offsets outside the %d-byte file: %w", i, j, size, streaming.ErrCorrupt)
			}
		}
	}
	if total != md.NumRows {
		return fmt.Errorf("row groups hold %d rows, footer says %d: %w", total, md.NumRows, streaming.ErrCorrupt)
	}
	return nil
}

func corruptError(p any) error {
	return fmt.Errorf("undecodable Parquet (decoder panicked: %v): %w", p, streaming.ErrCorrupt)
}

// errByOffset asks All to find a resume point by offset: its file is gone.
var errByOffset = errors.New("resume file gone")

// maxReplans bounds how often one All call lists the archive again after
// files vanished under it (compaction swaps).
const maxReplans = 16

// All streams every row from position from (the zero Position for the
// start), planning page by page as it goes. The sequence stops at the
// first error, which it yields. When a file vanishes while the archive is
// read (compaction replaced it with a larger one) the reader lists again
// and resumes after the last row it yielded, by offset, so no row is
// skipped or read twice.
func (r *Reader) All(ctx context.Context, from Position) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		pos, byOffset := from, false
		for range maxReplans {
			next, err := r.scan(ctx, pos, byOffset, yield)
			switch {
			case err == nil:
				return
			case errors.Is(err, errByOffset):
				byOffset = true
			case errors.Is(err, ErrNotFound) && (next.File == "" || next.Seen > 0):
				pos, byOffset = next, false
			default:
				yield(Entry{}, err)
				return
			}
		}
		yield(Entry{}, fmt.Errorf("parquet reader: files under %q kept vanishing; gave up after %d listings", r.prefix, maxReplans))
	}
}

// scan streams rows from from and returns the position after the last
// row yielded. byOffset: from.File is gone; list its shard from the start
// and skip rows by offset.
func (r *Reader) scan(ctx context.Context, from Position, byOffset bool, yield func(Entry, error) bool) (Position, error) {
	last := from
	startAfter, skip := "", int64(-1)
	var shard string
	if from.File != "" {
		k, err := ParseFileName(from.File)
		if err != nil {
			return last, fmt.Errorf("parquet reader: resume position: %w", err)
		}
		shard = ShardPrefix(k.Pipeline, k.Shard)
		switch {
		case byOffset || from.Seen == 0:
			startAfter = shard // the shard from its start
		default:
			// The name just before from.File: no archive name lies between.
			startAfter, skip = from.File[:len(from.File)-1], from.SkipThrough
		}
	}
	started := from.File == "" || byOffset
	for fi, err := range r.Files(ctx, startAfter, skip) {
		if err != nil {
			return last, err
		}
		c := cursor{offset: -1}
		fromRow := int64(0)
		switch {
		case !started && fi.Name == from.File:
			started, fromRow = true, from.Row
			c = cursor{offset: from.Offset, seen: from.Seen}
		case !started && from.Seen > 0:
			return last, errByOffset // the file is gone: look for the point by offset
		case !started && fi.Name < from.File:
			continue // before the resume file: it only feeds SkipThrough
		case !started:
			return last, fmt.Errorf("parquet reader: resume position %s row %d: file is not in the archive under %q", from.File, from.Row, r.prefix)
		case byOffset && ShardPrefix(fi.Key.Pipeline, fi.Key.Shard) == shard:
			if fi.Key.Last < from.Offset {
				continue
			}
			c = cursor{offset: -1, dropBelow: from.Offset, dropAt: from.Seen}
			// The offsets below from.Offset were read (from files since
			// gone): its rows there are skipped, and its NewBytes and
			// the positions it yields say so.
			fi.SkipThrough = max(fi.SkipThrough, from.Offset-1)
		}
		for e, err := range r.file(ctx, fi, fromRow, c) {
			if err != nil {
				return last, err
			}
			if !yield(e, nil) {
				return last, nil
			}
			last = e.Pos.Next()
		}
	}
	if !started {
		// Nothing at or after from.File: it is gone, and so is all after it.
		if from.Seen > 0 {
			return last, errByOffset
		}
		return last, fmt.Errorf("parquet reader: resume position %s row %d: file is not in the archive under %q", from.File, from.Row, r.prefix)
	}
	return last, nil
}

// File streams the rows of one planned file from row fromRow on, skipping
// rows at or below fi.SkipThrough. The file is reopened, its whole-file
// checksum verified (see ChecksumKey; WithVerifyChecksum) and its
// fingerprint checked again, so a file corrupted or replaced since Plan is
// refused before any row of it is decoded. A file whose name's last
// offset is at or below fi.SkipThrough (covered by earlier files) yields
// nothing and is not opened at all.
func (r *Reader) File(ctx context.Context, fi FileInfo, fromRow int64) iter.Seq2[Entry, error] {
	return r.file(ctx, fi, fromRow, cursor{offset: -1})
}

// cursor counts the rows of one offset as they are yielded (for
// Position.Seen) and drops the rows a resume by offset has read already:
// those below dropBelow and the first dropAt rows of offset dropBelow.
type cursor struct {
	offset, seen      int64
	dropBelow, dropAt int64
}

func (r *Reader) file(ctx context.Context, fi FileInfo, fromRow int64, c cursor) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		if fi.Key.Last <= fi.SkipThrough {
			// Covered: its name says every row is at or below what
			// earlier files hold, so none would be yielded; it is not
			// opened (its checksum, fingerprint and rows unread).
			if r.cfg.onFile != nil {
				r.cfg.onFile(fi)
			}
			return
		}
		of, err := r.open(ctx, fi.Name, r.cfg.verify)
		if err != nil {
			yield(Entry{}, err)
			return
		}
		defer of.Close()
		// Once open: a file gone under the reader (compacted; All lists
		// again) is not started, so it is not counted beside the file
		// that replaced it.
		if r.cfg.onFile != nil {
			r.cfg.onFile(fi)
		}
		f := of.f
		if fromRow < 0 || fromRow > f.NumRows() {
			yield(Entry{}, fmt.Errorf("parquet reader: archive file %s: resume row %d outside 0..%d", fi.Name, fromRow, f.NumRows()))
			return
		}
		batch := make([]Row, r.cfg.batchRows)
		base := int64(0)
		md := f.Metadata()
		for i, rg := range f.RowGroups() {
			n := rg.NumRows()
			if fromRow >= base+n {
				base += n
				continue
			}
			if err := loadRowGroup(of, &md.RowGroups[i]); err != nil {
				yield(Entry{}, fmt.Errorf("parquet reader: archive file %s: row group at row %d: %w", fi.Name, base, err))
				return
			}
			ok, err := r.readGroup(ctx, fi, rg, base, max(fromRow-base, 0), batch, &c, yield)
			if err != nil {
				yield(Entry{}, fmt.Errorf("parquet reader: archive file %s: row group at row %d: %w", fi.Name, base, err))
				return
			}
			if !ok {
				return
			}
			base += n
		}
	}
}

// loadRowGroup reads a row group's bytes into of's window (one read) and
// checks its pages (checkPages) before the decoder touches them.
func loadRowGroup(of *openedFile, rg *format.RowGroup) error {
	start, end := rowGroupRange(rg)
	if start < 4 || end > of.obj.Size()-8 || end-start > maxRowGroupBytes {
		return fmt.Errorf("column chunks at bytes %d-%d of a %d-byte file (at most %d bytes per row group): %w",
			start, end, of.obj.Size(), maxRowGroupBytes, streaming.ErrCorrupt)
	}
	if err := of.win.load(start, end); err != nil {
		return err
	}
	return checkPages(of.win, rg)
}

// readGroup yields the rows of one row group from row skip (relative to
// the group) on. ok is false when the consumer stopped.
//
// A panic of the decoder (corrupt pages) becomes an error wrapping
// streaming.ErrCorrupt; a panic of the consumer's loop body is re-raised.
func (r *Reader) readGroup(ctx context.Context, fi FileInfo, rg pq.RowGroup, base, skip int64, batch []Row, c *cursor, yield func(Entry, error) bool) (ok bool, err error) {
	inYield := false
	defer func() {
		if p := recover(); p != nil {
			if inYield {
				panic(p)
			}
			ok, err = false, corruptError(p)
		}
	}()
	rd := pq.NewGenericRowGroupReader[Row](rg)
	defer rd.Close()
	if skip > 0 {
		if err := rd.SeekToRow(skip); err != nil {
			return false, err
		}
	}
	idx := base + skip
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		n, err := rd.Read(batch)
		for _, row := range batch[:n] {
			at := idx
			idx++
			if row.Offset <= fi.SkipThrough || row.Offset < c.dropBelow {
				continue
			}
			if row.Offset == c.dropBelow && c.dropAt > 0 {
				c.dropAt--
				continue
			}
			if row.Offset != c.offset {
				c.offset, c.seen = row.Offset, 0
			}
			pos := Position{File: fi.Name, Row: at, Offset: row.Offset, Seen: c.seen, SkipThrough: fi.SkipThrough}
			c.seen++
			inYield = true
			more := yield(Entry{Row: row, Pos: pos, FileSize: fi.Size}, nil)
			inYield = false
			if !more {
				return false, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}
