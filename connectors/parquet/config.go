package parquet

import (
	"fmt"
	"time"

	"github.com/parquet-go/parquet-go/format"
)

// WriterOption configures a Writer.
type WriterOption func(*writerConfig)

type writerConfig struct {
	rowGroupRows   int64
	maxRowsPerFile int
	compression    Compression
	zstdLevel      int

	// RollingWriter only.
	targetFileSize int64
	maxFileAge     time.Duration
	partSize       int64
	now            func() time.Time
	// inlineRowGroups makes pre-commit records hold every row group of
	// the open file instead of writing row-group segments: the format
	// before segments, the benchmarks' baseline.
	inlineRowGroups bool
}

// The RollingWriter's defaults: WithTargetFileSize and WithMaxFileAge.
const (
	DefaultTargetFileSize = 128 << 20
	DefaultMaxFileAge     = 15 * time.Minute
)

func defaultWriterConfig() writerConfig {
	return writerConfig{
		rowGroupRows: 16384, maxRowsPerFile: 1 << 20, zstdLevel: 3,
		targetFileSize: DefaultTargetFileSize, maxFileAge: DefaultMaxFileAge, partSize: 8 << 20, now: time.Now,
	}
}

// newWriterConfig applies opts to the defaults and validates the result.
func newWriterConfig(opts []WriterOption) (writerConfig, error) {
	cfg := defaultWriterConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return cfg, cfg.validate()
}

func (c writerConfig) validate() error {
	if c.rowGroupRows < 1 {
		return fmt.Errorf("parquet writer: row group size must be at least 1 row, got %d", c.rowGroupRows)
	}
	if c.maxRowsPerFile < 1 {
		return fmt.Errorf("parquet writer: max rows per file must be at least 1, got %d", c.maxRowsPerFile)
	}
	if c.compression != Zstd && c.compression != Snappy {
		return fmt.Errorf("parquet writer: unknown compression %d", c.compression)
	}
	if c.zstdLevel < 1 || c.zstdLevel > 22 {
		return fmt.Errorf("parquet writer: zstd level must be 1..22, got %d", c.zstdLevel)
	}
	if c.targetFileSize < 1 || c.targetFileSize > maxFileSize {
		return fmt.Errorf("parquet writer: target file size must be 1 byte..%d bytes, got %d", int64(maxFileSize), c.targetFileSize)
	}
	if c.maxFileAge <= 0 {
		return fmt.Errorf("parquet writer: max file age must be positive, got %v", c.maxFileAge)
	}
	if c.partSize < 1 {
		return fmt.Errorf("parquet writer: part size must be at least 1 byte, got %d", c.partSize)
	}
	if c.now == nil {
		return fmt.Errorf("parquet writer: nil clock")
	}
	return nil
}

// MaxTargetFileSize bounds the target file size (WithTargetFileSize). A
// file closes once it reached the target, so it passes it by a row group
// and its footer: on S3, a file over 5 GiB (the most one CopyObject
// copies) is moved to its name with a multipart copy.
const MaxTargetFileSize = 5 << 30

const maxFileSize = MaxTargetFileSize

// WithTargetFileSize sets the size at which a RollingWriter finishes a
// file and starts the next (checked between records). Default 128 MiB;
// at most 5 GiB.
func WithTargetFileSize(n int64) WriterOption { return func(c *writerConfig) { c.targetFileSize = n } }

// WithMaxFileAge sets how long a RollingWriter keeps a file open before
// it finishes it, however small: the longest a row waits before its file
// becomes visible. Default 15 minutes.
func WithMaxFileAge(d time.Duration) WriterOption { return func(c *writerConfig) { c.maxFileAge = d } }

// WithPartSize sets how many encoded bytes a RollingWriter gathers before
// it uploads them as one part (an object store's minimum part size is the
// floor). Default 8 MiB.
func WithPartSize(n int64) WriterOption { return func(c *writerConfig) { c.partSize = n } }

// WithClock sets the clock a RollingWriter measures file age by. Default
// time.Now.
func WithClock(now func() time.Time) WriterOption { return func(c *writerConfig) { c.now = now } }

// WithRowGroupRows sets how many rows go in one row group; readers hold
// one row group's pages at a time. A RollingWriter also makes a row group
// of the rows it holds at a cut when they are at least an eighth of this.
// Default 16384.
func WithRowGroupRows(n int64) WriterOption { return func(c *writerConfig) { c.rowGroupRows = n } }

// WithMaxRowsPerFile caps the rows Writer.Append buffers before it writes
// a file on its own (the writer's memory bound; a RollingWriter ignores
// it). Default 1<<20.
func WithMaxRowsPerFile(n int) WriterOption { return func(c *writerConfig) { c.maxRowsPerFile = n } }

// WithZstdLevel sets the zstd compression level (1..22). Default 3.
func WithZstdLevel(level int) WriterOption { return func(c *writerConfig) { c.zstdLevel = level } }

// WithCompression sets the codec pages are compressed with. Default Zstd.
func WithCompression(c Compression) WriterOption {
	return func(cfg *writerConfig) { cfg.compression = c }
}

// Compression is a codec the archive's writers compress pages with.
// Readers read both; a file may hold both (a file a restarted writer
// continued with another codec), as Parquet allows per column chunk.
type Compression int8

const (
	// Zstd (the default) writes the smallest files, at the level
	// WithZstdLevel sets.
	Zstd Compression = iota
	// Snappy spends a fifth to a third less CPU per row than zstd level 3
	// and writes larger files (BenchmarkRollingCompression measures both):
	// for a hot path whose CPU is short. Compaction writes zstd, so the
	// small files a checkpoint cadence leaves end up small on disk too.
	Snappy
)

// ParseCompression parses a codec's name: zstd or snappy.
func ParseCompression(s string) (Compression, error) {
	switch s {
	case "zstd", "":
		return Zstd, nil
	case "snappy":
		return Snappy, nil
	}
	return 0, fmt.Errorf("compression %q is not one the archive writes (zstd or snappy)", s)
}

func (c Compression) String() string {
	switch c {
	case Zstd:
		return "zstd"
	case Snappy:
		return "snappy"
	}
	return fmt.Sprintf("Compression(%d)", int8(c))
}

// MarshalText implements encoding.TextMarshaler.
func (c Compression) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (a spec's
// compression key).
func (c *Compression) UnmarshalText(b []byte) error {
	v, err := ParseCompression(string(b))
	if err == nil {
		*c = v
	}
	return err
}

// codec is c's Parquet codec.
func (c Compression) codec() format.CompressionCodec {
	if c == Snappy {
		return format.Snappy
	}
	return format.Zstd
}

// ReaderOption configures a Reader.
type ReaderOption func(*readerConfig)

type readerConfig struct {
	expected  string
	batchRows int
	verify    bool
	onFile    func(FileInfo)
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

// WithOnFile sets a function File and All call as they start reading a
// file, once it is open, before its first row: also for a file none of
// whose rows they yield (all at or below its SkipThrough, covered by
// earlier files), so a consumer counting files by their rows would miss
// it (such a file, covered by its name's offsets, is not opened). It is
// not called for a file that could not be opened (one gone: All lists
// again). All calls it again for a file it reads again after listing
// anew (see All); its FileInfo.SkipThrough then counts the offsets read
// before.
func WithOnFile(fn func(FileInfo)) ReaderOption { return func(c *readerConfig) { c.onFile = fn } }
