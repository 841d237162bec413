package parquet

import "fmt"

// WriterOption configures a Writer.
type WriterOption func(*writerConfig)

type writerConfig struct {
	rowGroupRows   int64
	maxRowsPerFile int
	zstdLevel      int
}

func defaultWriterConfig() writerConfig {
	return writerConfig{rowGroupRows: 16384, maxRowsPerFile: 1 << 20, zstdLevel: 3}
}

func (c writerConfig) validate() error {
	if c.rowGroupRows < 1 {
		return fmt.Errorf("parquet writer: row group size must be at least 1 row, got %d", c.rowGroupRows)
	}
	if c.maxRowsPerFile < 1 {
		return fmt.Errorf("parquet writer: max rows per file must be at least 1, got %d", c.maxRowsPerFile)
	}
	if c.zstdLevel < 1 || c.zstdLevel > 22 {
		return fmt.Errorf("parquet writer: zstd level must be 1..22, got %d", c.zstdLevel)
	}
	return nil
}

// WithRowGroupRows sets how many rows go in one row group; readers hold
// one row group's pages at a time. Default 16384.
func WithRowGroupRows(n int64) WriterOption { return func(c *writerConfig) { c.rowGroupRows = n } }

// WithMaxRowsPerFile caps the rows Append buffers before it writes a file
// on its own (the writer's memory bound). Default 1<<20.
func WithMaxRowsPerFile(n int) WriterOption { return func(c *writerConfig) { c.maxRowsPerFile = n } }

// WithZstdLevel sets the zstd compression level (1..22). Default 3.
func WithZstdLevel(level int) WriterOption { return func(c *writerConfig) { c.zstdLevel = level } }

// ReaderOption configures a Reader.
type ReaderOption func(*readerConfig)

type readerConfig struct {
	expected  string
	batchRows int
	verify    bool
}

func defaultReaderConfig() readerConfig {
	return readerConfig{expected: SchemaFingerprint(), batchRows: 1024, verify: true}
}

func (c readerConfig) validate() error {
	if c.expected == "" {
		return fmt.Errorf("parquet reader: expected schema fingerprint is empty")
	}
	if c.batchRows < 1 {
		return fmt.Errorf("parquet reader: batch must be at least 1 row, got %d", c.batchRows)
	}
	return nil
}

// WithExpectedFingerprint sets the schema fingerprint every file must
// carry (for a backfill: the one stamped in the snapshot it starts from).
// Default SchemaFingerprint().
func WithExpectedFingerprint(fp string) ReaderOption {
	return func(c *readerConfig) { c.expected = fp }
}

// WithBatchRows sets how many rows the reader decodes per call into the
// file. Default 1024.
func WithBatchRows(n int) ReaderOption { return func(c *readerConfig) { c.batchRows = n } }

// WithVerifyChecksum sets whether File and All verify a file's whole-file
// checksum before decoding it. Verifying reads each file once more
// (streamed, in 1 MiB chunks); turn it off only for storage that
// checksums end to end. Default true.
func WithVerifyChecksum(on bool) ReaderOption { return func(c *readerConfig) { c.verify = on } }
