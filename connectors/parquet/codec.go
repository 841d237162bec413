package parquet

import (
	"sync"

	kzstd "github.com/klauspost/compress/zstd"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// zstdCodec is the archive writers' page compression: zstd with the
// options parquet-go's own codec uses (no CRC, zero frames), the same
// frames, but one encoder kept for the codec's life. parquet-go's codec
// keeps its encoders in a pool the garbage collector empties, and a new
// encoder allocates and clears its history (a megabyte and more) before
// its first page: under a busy pipeline's GC that was most of the
// archive's zstd cost. A codec belongs to one writer (one goroutine).
type zstdCodec struct {
	level kzstd.EncoderLevel
	enc   *kzstd.Encoder

	decOnce sync.Once
	dec     *kzstd.Decoder
	decErr  error
}

func newZstdCodec(level int) *zstdCodec {
	return &zstdCodec{level: kzstd.EncoderLevelFromZstd(level)}
}

func (c *zstdCodec) String() string { return "ZSTD" }

func (c *zstdCodec) CompressionCodec() format.CompressionCodec { return format.Zstd }

func (c *zstdCodec) Encode(dst, src []byte) ([]byte, error) {
	if c.enc == nil {
		enc, err := kzstd.NewWriter(nil,
			kzstd.WithEncoderConcurrency(1),
			kzstd.WithEncoderLevel(c.level),
			kzstd.WithZeroFrames(true),
			kzstd.WithEncoderCRC(false),
		)
		if err != nil {
			return nil, err
		}
		c.enc = enc
	}
	return c.enc.EncodeAll(src, dst[:0]), nil
}

// Decode is there for the interface; the writers never call it.
func (c *zstdCodec) Decode(dst, src []byte) ([]byte, error) {
	c.decOnce.Do(func() { c.dec, c.decErr = kzstd.NewReader(nil, kzstd.WithDecoderConcurrency(1)) })
	if c.decErr != nil {
		return nil, c.decErr
	}
	return c.dec.DecodeAll(src, dst[:0])
}

// encoderOptions are the parquet-go writer options of every archive
// file's row groups: the archive schema, zstd at level, rowGroupRows rows
// per row group. Pages carry no statistics (the column chunks do), and
// the string columns none at all: parquet-go computes a dictionary
// column's bounds by comparing the strings of every row, twice per page,
// a quarter of the archive's CPU, for bounds no reader of the archive
// uses (inspect reads ts's).
func encoderOptions(level int, rowGroupRows int64) []pq.WriterOption {
	return []pq.WriterOption{
		Schema(),
		pq.Compression(newZstdCodec(level)),
		pq.MaxRowsPerRowGroup(rowGroupRows),
		pq.CreatedBy("tflo", "archive-v1", ""),
		pq.DataPageStatistics(false),
		pq.SkipPageBounds("sensor"),
		pq.SkipPageBounds("signal"),
	}
}
