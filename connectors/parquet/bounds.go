package parquet

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/streaming"
)

// Bounds on what a file may make the reader allocate. parquet-go sizes its
// buffers from fields of the file (the footer length, list lengths in the
// footer, page sizes, zstd frame headers) before anything is checked, and
// an allocation the machine cannot make is a fatal error, not a panic. The
// reader checks each of these fields against the bounds below, and against
// the file's own size, before parquet-go sees them.
const (
	// maxFooterBytes bounds a file's footer (its metadata). A footer of a
	// 128 MiB archive file with 64 row groups is about 50 KiB.
	maxFooterBytes = 16 << 20
	// maxPageBytes bounds one page's uncompressed size (parquet-go's
	// writer makes pages of 256 KiB).
	maxPageBytes = 64 << 20
	// maxRowGroupBytes bounds the compressed bytes of one row group: the
	// reader holds one row group in memory.
	maxRowGroupBytes = 512 << 20
	// maxHeaderBytes bounds one page header (with its statistics).
	maxHeaderBytes = 1 << 20
	// footerBudgetFactor: decoding a footer of n bytes may allocate
	// footerBudgetFactor*n + 1 MiB for its lists.
	footerBudgetFactor = 32
)

// readFooter reads and checks the footer of obj: the magic, the footer
// length against the file's size and maxFooterBytes, and the footer's
// thrift shape. Errors wrap streaming.ErrCorrupt.
func readFooter(obj Object) ([]byte, error) {
	size := obj.Size()
	if size < 12 {
		return nil, fmt.Errorf("%d bytes is too short for a Parquet file: %w", size, streaming.ErrCorrupt)
	}
	var head [4]byte
	if _, err := obj.ReadAt(head[:], 0); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	var tail [8]byte
	if _, err := obj.ReadAt(tail[:], size-8); err != nil {
		return nil, fmt.Errorf("read footer length: %w", err)
	}
	if string(head[:]) != "PAR1" || string(tail[4:]) != "PAR1" {
		return nil, fmt.Errorf("no Parquet magic at both ends of the file: %w", streaming.ErrCorrupt)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 || n > maxFooterBytes {
		return nil, fmt.Errorf("footer of %d bytes in a %d-byte file (at most %d): %w", n, size, min(size-12, maxFooterBytes), streaming.ErrCorrupt)
	}
	footer := make([]byte, n)
	if _, err := obj.ReadAt(footer, size-8-n); err != nil {
		return nil, fmt.Errorf("read footer: %w", err)
	}
	used, err := walkThrift(footer, footerBudgetFactor*n+1<<20)
	if err != nil {
		return nil, fmt.Errorf("footer: %w: %w", err, streaming.ErrCorrupt)
	}
	if int64(used) != n {
		return nil, fmt.Errorf("footer: %d bytes of metadata, %d declared: %w", used, n, streaming.ErrCorrupt)
	}
	return footer, nil
}

// window serves reads of one byte range (a row group) from memory and
// passes the others to the object. Loading a row group whole makes one
// read of it (one GET on an object store) and lets the page walk check the
// very bytes the decoder reads next.
type window struct {
	Object
	mu    sync.RWMutex
	start int64
	buf   []byte
}

func (w *window) ReadAt(p []byte, off int64) (int, error) {
	w.mu.RLock()
	if off >= w.start && off+int64(len(p)) <= w.start+int64(len(w.buf)) {
		n := copy(p, w.buf[off-w.start:])
		w.mu.RUnlock()
		return n, nil
	}
	w.mu.RUnlock()
	return w.Object.ReadAt(p, off)
}

// load reads [start, end) into memory, reusing the buffer.
func (w *window) load(start, end int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := int(end - start)
	if cap(w.buf) < n {
		w.buf = make([]byte, n)
	}
	w.buf = w.buf[:n]
	w.start = start
	if _, err := w.Object.ReadAt(w.buf, start); err != nil {
		w.buf = w.buf[:0]
		return fmt.Errorf("read row group bytes %d-%d: %w", start, end, err)
	}
	return nil
}

// chunkRange returns the byte range of a column chunk's pages.
func chunkRange(cm *format.ColumnMetaData) (int64, int64) {
	start := cm.DataPageOffset
	if cm.DictionaryPageOffset > 0 && cm.DictionaryPageOffset < start {
		start = cm.DictionaryPageOffset
	}
	return start, start + cm.TotalCompressedSize
}

// rowGroupRange returns the byte range of a row group's column chunks.
func rowGroupRange(rg *format.RowGroup) (int64, int64) {
	lo, hi := int64(-1), int64(0)
	for i := range rg.Columns {
		s, e := chunkRange(&rg.Columns[i].MetaData)
		if lo < 0 || s < lo {
			lo = s
		}
		hi = max(hi, e)
	}
	return max(lo, 0), hi
}

// checkPages walks the page headers of every column chunk of rg (whose
// bytes w holds) and bounds what decoding them allocates: each header's
// thrift shape, the page sizes against the chunk and maxPageBytes, the
// value counts against the row group's rows, and for zstd pages the frame
// headers against the page's uncompressed size. Errors wrap
// streaming.ErrCorrupt.
func checkPages(w *window, rg *format.RowGroup) error {
	for j := range rg.Columns {
		cm := &rg.Columns[j].MetaData
		if err := checkChunkPages(w, cm, rg.NumRows); err != nil {
			return fmt.Errorf("column %d: %w: %w", j, err, streaming.ErrCorrupt)
		}
	}
	return nil
}

func checkChunkPages(w *window, cm *format.ColumnMetaData, rows int64) error {
	start, end := chunkRange(cm)
	if start < w.start || end > w.start+int64(len(w.buf)) || start > end {
		return fmt.Errorf("pages %d-%d outside the row group's bytes", start, end)
	}
	chunk := w.buf[start-w.start : end-w.start]
	var values int64
	dict := false
	for off := 0; off < len(chunk); {
		hb := chunk[off:min(len(chunk), off+maxHeaderBytes)]
		n, err := walkThrift(hb, 1<<20)
		if err != nil {
			return fmt.Errorf("page header at byte %d: %w", start+int64(off), err)
		}
		var h format.PageHeader
		if err := thrift.Unmarshal(new(thrift.CompactProtocol), hb[:n], &h); err != nil {
			return fmt.Errorf("page header at byte %d: %w", start+int64(off), err)
		}
		off += n
		at := start + int64(off)
		if h.CompressedPageSize < 0 || int(h.CompressedPageSize) > len(chunk)-off {
			return fmt.Errorf("page at byte %d: %d compressed bytes, %d left in the chunk", at, h.CompressedPageSize, len(chunk)-off)
		}
		if h.UncompressedPageSize < 0 || h.UncompressedPageSize > maxPageBytes {
			return fmt.Errorf("page at byte %d: uncompressed size %d outside 0..%d", at, h.UncompressedPageSize, maxPageBytes)
		}
		data := chunk[off : off+int(h.CompressedPageSize)]
		off += int(h.CompressedPageSize)
		levels, compressed := int32(0), true
		switch h.Type {
		case format.DictionaryPage:
			if dict || values > 0 {
				return fmt.Errorf("page at byte %d: dictionary page out of place", at)
			}
			dict = true
			if !h.DictionaryPageHeader.Valid {
				return fmt.Errorf("dictionary page at byte %d: no dictionary header", at)
			}
			if n := h.DictionaryPageHeader.V.NumValues; n < 0 || int64(n) > rows {
				return fmt.Errorf("dictionary page at byte %d: %d values for %d rows", at, n, rows)
			}
		case format.DataPage:
			if !h.DataPageHeader.Valid {
				return fmt.Errorf("data page at byte %d: no data page header", at)
			}
			n := h.DataPageHeader.V.NumValues
			if n < 0 || int64(n) > rows-values {
				return fmt.Errorf("data page at byte %d: %d values, %d rows left", at, n, rows-values)
			}
			values += int64(n)
		case format.DataPageV2:
			if !h.DataPageHeaderV2.Valid {
				return fmt.Errorf("data page at byte %d: no data page header", at)
			}
			v2 := &h.DataPageHeaderV2.V
			if v2.NumValues < 0 || int64(v2.NumValues) > rows-values || v2.NumRows < 0 || v2.NumRows > v2.NumValues || v2.NumNulls < 0 || v2.NumNulls > v2.NumValues {
				return fmt.Errorf("data page at byte %d: %d values, %d rows, %d nulls, %d rows left", at, v2.NumValues, v2.NumRows, v2.NumNulls, rows-values)
			}
			levels = v2.DefinitionLevelsByteLength + v2.RepetitionLevelsByteLength
			if v2.DefinitionLevelsByteLength < 0 || v2.RepetitionLevelsByteLength < 0 || levels > h.CompressedPageSize || levels > h.UncompressedPageSize {
				return fmt.Errorf("data page at byte %d: %d level bytes in a page of %d", at, levels, h.CompressedPageSize)
			}
			if b, ok := v2.IsCompressed.Get(); ok && !b {
				compressed = false
			}
			values += int64(v2.NumValues)
		case format.IndexPage:
			continue
		default:
			return fmt.Errorf("page at byte %d: unknown page type %d", at, h.Type)
		}
		body, declared := data[levels:], int64(h.UncompressedPageSize-levels)
		switch {
		case !compressed || cm.Codec == format.Uncompressed:
			if int64(len(body)) != declared {
				return fmt.Errorf("uncompressed page at byte %d: %d bytes, header says %d", at, len(body), declared)
			}
		case cm.Codec == format.Zstd:
			if _, err := zstdDecodedBound(body, declared, maxPageBytes); err != nil {
				return fmt.Errorf("page at byte %d: %w", at, err)
			}
		case cm.Codec == format.Snappy:
			// A snappy block starts with its decoded length; the decoder
			// allocates that much before it checks anything else.
			n, err := s2.DecodedLen(body)
			if err != nil {
				return fmt.Errorf("snappy page at byte %d: %w", at, err)
			}
			if int64(n) != declared {
				return fmt.Errorf("snappy page at byte %d: decodes to %d bytes, header says %d", at, n, declared)
			}
		default:
			return fmt.Errorf("codec %v is not one the archive writes", cm.Codec)
		}
	}
	if values != rows {
		return fmt.Errorf("pages hold %d values for %d rows", values, rows)
	}
	return nil
}
