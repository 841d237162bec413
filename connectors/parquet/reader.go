package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/streaming"
)

// Position is a resume point of a backfill: the next row to read is row
// Row (counted from 0, in file order) of archive file File. The zero
// Position is the start of the archive. It is small and JSON-friendly so
// an activity can heartbeat it.
type Position struct {
	File string `json:"file,omitempty"`
	Row  int64  `json:"row"`
}

// Next returns the position after p's row.
func (p Position) Next() Position { return Position{File: p.File, Row: p.Row + 1} }

// Entry is one row read from the archive and its position.
type Entry struct {
	Row Row
	// Pos is this row's position; resume after it from Pos.Next().
	Pos Position
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
// skipping hidden names (an element starting with '_' or '.', such as
// StagingDir),
// after checking each file's schema fingerprint (one footer read per
// file). It fails with a *FingerprintError on the first mismatch and with
// an error wrapping ErrBadName for an object whose name is not a FileKey
// name. Of several files with the same shard and offset range, only the
// one of the highest epoch is kept.
func (r *Reader) Plan(ctx context.Context) ([]FileInfo, error) {
	objs, err := r.archive.List(ctx, r.prefix)
	if err != nil {
		return nil, fmt.Errorf("parquet reader: list %q: %w", r.prefix, err)
	}
	var plan []FileInfo
	for _, o := range objs {
		if hiddenName(o.Name) {
			continue // the archive's working objects (StagingDir) and other hidden files
		}
		k, err := ParseFileName(o.Name)
		if err != nil {
			return nil, fmt.Errorf("parquet reader: %w", err)
		}
		fi := FileInfo{Key: k, Name: o.Name, Size: o.Size, SkipThrough: -1}
		// The listing is sorted by (pipeline, shard, first, last, epoch):
		// a later file with the same range has a higher epoch and wins.
		if n := len(plan); n > 0 && sameRange(plan[n-1].Key, k) {
			plan[n-1] = fi
			continue
		}
		plan = append(plan, fi)
	}
	for i := range plan {
		if i > 0 && sameShard(plan[i-1].Key, plan[i].Key) {
			plan[i].SkipThrough = max(plan[i-1].SkipThrough, plan[i-1].Key.Last)
		}
		if err := r.inspect(ctx, &plan[i]); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

func sameShard(a, b FileKey) bool { return a.Pipeline == b.Pipeline && a.Shard == b.Shard }

func sameRange(a, b FileKey) bool { return sameShard(a, b) && a.First == b.First && a.Last == b.Last }

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
// fingerprint must be expected; with verify, after checking its
// whole-file checksum.
func openChecked(obj Object, name, expected string, verify bool) (*openedFile, error) {
	if verify {
		if err := verifyChecksum(obj); err != nil {
			return nil, fmt.Errorf("parquet reader: archive file %s: %w", name, err)
		}
	}
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
// a codec the archive writes (zstd, or none), one value per row (the schema is flat and required), and
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
			case cm.Codec != format.Zstd && cm.Codec != format.Uncompressed:
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

// All plans the archive and streams every row from position from (the
// zero Position for the start). The sequence stops at the first error,
// which it yields; from.File must be a file of the plan.
func (r *Reader) All(ctx context.Context, from Position) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		plan, err := r.Plan(ctx)
		if err != nil {
			yield(Entry{}, err)
			return
		}
		start := 0
		if from.File != "" {
			start = -1
			for i, fi := range plan {
				if fi.Name == from.File {
					start = i
					break
				}
			}
			if start < 0 {
				yield(Entry{}, fmt.Errorf("parquet reader: resume position %s row %d: file is not in the archive plan of %q (%d files)", from.File, from.Row, r.prefix, len(plan)))
				return
			}
		}
		for i := start; i < len(plan); i++ {
			row := int64(0)
			if i == start {
				row = from.Row
			}
			for e, err := range r.File(ctx, plan[i], row) {
				if !yield(e, err) || err != nil {
					return
				}
			}
		}
	}
}

// File streams the rows of one planned file from row fromRow on, skipping
// rows at or below fi.SkipThrough. The file is reopened, its whole-file
// checksum verified (see ChecksumKey; WithVerifyChecksum) and its
// fingerprint checked again, so a file corrupted or replaced since Plan is
// refused before any row of it is decoded.
func (r *Reader) File(ctx context.Context, fi FileInfo, fromRow int64) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		of, err := r.open(ctx, fi.Name, r.cfg.verify)
		if err != nil {
			yield(Entry{}, err)
			return
		}
		defer of.Close()
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
			ok, err := r.readGroup(ctx, fi, rg, base, max(fromRow-base, 0), batch, yield)
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
func (r *Reader) readGroup(ctx context.Context, fi FileInfo, rg pq.RowGroup, base, skip int64, batch []Row, yield func(Entry, error) bool) (ok bool, err error) {
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
			pos := Position{File: fi.Name, Row: idx}
			idx++
			if row.Offset <= fi.SkipThrough {
				continue
			}
			inYield = true
			more := yield(Entry{Row: row, Pos: pos}, nil)
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
