package parquet

import (
	"context"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

// Writer writes one shard's derived signals to archive files. Each file
// holds the rows of a contiguous range of source offsets, is named by its
// FileKey (pipeline, shard, epoch, first and last offset), carries the
// schema fingerprint in its key-value metadata, and is stored with one
// Archive.PutAtomic — so a replay of the same records under the same epoch
// rewrites the same file, and a crash never leaves half a file.
//
// A Writer belongs to one shard owner at one epoch (make a new one after
// a rebalance) and is used by one goroutine.
type Writer struct {
	archive  Archive
	pipeline string
	shard    int32
	epoch    streaming.Epoch
	cfg      writerConfig

	pending []Row
	// failed is the number of leading pending rows whose file failed to
	// be written (0: none). A failed PutAtomic may have stored the file
	// all the same (an S3 PUT answered by a timeout), so those rows are
	// written again as that file, under its name, before any row
	// buffered after them: a file of other bounds would overlap it.
	failed int
	b      *fileBuilder
}

// NewWriter returns a writer of pipeline's shard at epoch into a.
func NewWriter(a Archive, pipeline string, shard int32, epoch streaming.Epoch, opts ...WriterOption) (*Writer, error) {
	if a == nil {
		return nil, fmt.Errorf("parquet writer: nil archive")
	}
	cfg, err := newWriterConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := (FileKey{Pipeline: pipeline, Shard: shard, Epoch: epoch}).Validate(); err != nil {
		return nil, fmt.Errorf("parquet writer: %w", err)
	}
	return &Writer{archive: a, pipeline: pipeline, shard: shard, epoch: epoch, cfg: cfg,
		b: newFileBuilder(cfg)}, nil
}

// Append buffers rows for the next file. Once the buffer holds the
// configured maximum rows per file, Append writes it as a file before
// taking a row of a new offset — never between two rows of one offset, so
// each offset's rows live in one file (the reader relies on it) and the
// buffer exceeds the maximum only by the rows of one record. On a write
// error Append returns it and keeps every row: the next Append or Flush
// writes the failed file's rows again, alone and under the same name
// (the failed write may have stored it), before the rows buffered since.
func (w *Writer) Append(ctx context.Context, rows ...Row) error {
	for i, row := range rows {
		if w.failed > 0 {
			if _, err := w.flushFirst(ctx, w.failed); err != nil {
				w.pending = append(w.pending, rows[i:]...)
				return err
			}
		}
		if n := len(w.pending); n >= w.cfg.maxRowsPerFile && row.Offset != w.pending[n-1].Offset {
			if _, err := w.flushFirst(ctx, n); err != nil {
				w.pending = append(w.pending, rows[i:]...)
				return err
			}
		}
		w.pending = append(w.pending, row)
	}
	return nil
}

// Pending returns the number of buffered rows.
func (w *Writer) Pending() int { return len(w.pending) }

// Flush writes the buffered rows as one file and reports its key; ok is
// false when nothing was buffered. Call it at checkpoint time, before the
// cursor is committed, so every committed offset is archived. On error the
// rows stay buffered. When a write failed before (here or in Append),
// Flush first writes that file's rows again under the same name, then the
// rows buffered after them as a second file, and reports the last key.
func (w *Writer) Flush(ctx context.Context) (key FileKey, ok bool, err error) {
	if len(w.pending) == 0 {
		return FileKey{}, false, nil
	}
	if w.failed > 0 && w.failed < len(w.pending) {
		if _, err := w.flushFirst(ctx, w.failed); err != nil {
			return FileKey{}, false, err
		}
	}
	key, err = w.flushFirst(ctx, len(w.pending))
	if err != nil {
		return FileKey{}, false, err
	}
	return key, true, nil
}

// flushFirst writes the first n buffered rows as one file and drops them
// from the buffer; on error it keeps them and remembers them as the file
// to write again.
func (w *Writer) flushFirst(ctx context.Context, n int) (FileKey, error) {
	key, err := w.WriteFile(ctx, w.pending[:n])
	if err != nil {
		w.failed = n
		return FileKey{}, err
	}
	w.failed = 0
	rest := copy(w.pending, w.pending[n:])
	clear(w.pending[rest:])
	w.pending = w.pending[:rest]
	return key, nil
}

// WriteFile writes rows as one file, bypassing the buffer. rows must be in
// source order: offsets never decrease. It returns the file's key.
func (w *Writer) WriteFile(ctx context.Context, rows []Row) (FileKey, error) {
	if len(rows) == 0 {
		return FileKey{}, fmt.Errorf("parquet writer %s: no rows to write", ShardPrefix(w.pipeline, w.shard))
	}
	for i := range rows {
		if err := checkRowSize(i, rows[i]); err != nil {
			return FileKey{}, fmt.Errorf("parquet writer %s: %w", ShardPrefix(w.pipeline, w.shard), err)
		}
		if i > 0 && rows[i].Offset < rows[i-1].Offset {
			return FileKey{}, fmt.Errorf("parquet writer %s: row %d has offset %d after offset %d: rows must be in source order",
				ShardPrefix(w.pipeline, w.shard), i, rows[i].Offset, rows[i-1].Offset)
		}
	}
	key := FileKey{Pipeline: w.pipeline, Shard: w.shard, Epoch: w.epoch, First: rows[0].Offset, Last: rows[len(rows)-1].Offset}
	if err := key.Validate(); err != nil {
		return FileKey{}, fmt.Errorf("parquet writer: %w", err)
	}
	data, err := w.encode(rows)
	if err != nil {
		return FileKey{}, fmt.Errorf("parquet writer: encode %s: %w", key.Name(), err)
	}
	if err := w.archive.PutAtomic(ctx, key.Name(), data); err != nil {
		return FileKey{}, err
	}
	return key, nil
}

// encode returns the Parquet bytes of rows.
func (w *Writer) encode(rows []Row) ([]byte, error) { return encodeRowsFile(w.b, rows) }
