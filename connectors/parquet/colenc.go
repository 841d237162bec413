package parquet

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/s2"
	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/delta"
	"github.com/parquet-go/parquet-go/encoding/plain"
	"github.com/parquet-go/parquet-go/encoding/rle"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// A columnEncoder encodes rows of the archive schema as Parquet row
// groups, column by column, straight from the rows' fields: the schema is
// fixed, so there is no reflection, no per-row value boxing and no page
// buffering. The pages are what parquet-go's writer made of the same
// rows, and what every file of older writers holds:
//
//	column  pages (DATA_PAGE_V2, zstd or snappy: WithCompression)
//	sensor  a PLAIN dictionary page, RLE_DICTIONARY data pages
//	signal  a PLAIN dictionary page, RLE_DICTIONARY data pages
//	ts      DELTA_BINARY_PACKED
//	mode    DELTA_BINARY_PACKED (a mode rarely changes: a few bytes a page)
//	value   PLAIN
//	offset  DELTA_BINARY_PACKED
//
// Each column chunk carries its min and max (the string columns' taken
// from their dictionaries, left out when longer than maxStringStats);
// pages carry none, as parquet-go's pages did not once their statistics
// were off. A data page holds at most pageValues values. An encoder
// belongs to one writer (one goroutine).
//
// It replaced parquet-go's GenericWriter, which spent most of the
// archive's CPU on the hot path (BenchmarkSMASpecArchive) outside the
// encoding itself: bounds of the string columns compared every row's
// string twice per page, its zstd encoders lived in a pool every garbage
// collection emptied (a new encoder clears a megabyte of history), and
// each batch went through a writer reset and a footer of its own.
type columnEncoder struct {
	codec format.CompressionCodec
	level kzstd.EncoderLevel // of zstd
	zstd  *kzstd.Encoder

	sensors, signals stringDict

	// Scratch, reused across row groups.
	idx  []int32
	i32  []int32
	i64  []int64
	f64  []float64
	body []byte // a page's encoded values
	comp []byte // a page's compressed values
}

// pageValues bounds a data page's values (a page of doubles is 128 KiB,
// one zstd block).
const pageValues = 16384

func newColumnEncoder(c Compression, zstdLevel int) *columnEncoder {
	return &columnEncoder{codec: c.codec(), level: kzstd.EncoderLevelFromZstd(zstdLevel)}
}

// stringDict is a string column's dictionary in one column chunk.
type stringDict struct {
	index  map[string]int32
	values []string
	size   int // bytes of the values
	// seen caches ids by where a string's bytes are: rows share the
	// strings of their outputs (a record's key, a graph's output names),
	// so most rows find theirs here without hashing or comparing bytes.
	seen [dictSeen]seenString
}

// dictSeen is the size of stringDict's cache by address (a power of 2).
const dictSeen = 16

type seenString struct {
	data *byte
	n    int
	id   int32
}

func (d *stringDict) reset() {
	if d.index == nil {
		d.index = make(map[string]int32)
	}
	clear(d.index)
	clear(d.values)
	d.values, d.size = d.values[:0], 0
	// The addresses are only valid while the rows being encoded hold
	// their strings.
	d.seen = [dictSeen]seenString{}
}

// id returns s's index, adding s. Strings at the same address with the
// same length are the same string (strings are immutable, and the rows
// being encoded keep theirs alive), so that is looked at first.
func (d *stringDict) id(s string) int32 {
	p := unsafe.StringData(s)
	slot := &d.seen[(uintptr(unsafe.Pointer(p))>>3)&(dictSeen-1)]
	if slot.data == p && slot.n == len(s) && p != nil {
		return slot.id
	}
	i, ok := d.index[s]
	if !ok {
		i = int32(len(d.values))
		d.index[s] = i
		d.values = append(d.values, s)
		d.size += 4 + len(s)
	}
	*slot = seenString{data: p, n: len(s), id: i}
	return i
}

// bounds returns the dictionary's smallest and largest value.
func (d *stringDict) bounds() (lo, hi string) {
	lo, hi = d.values[0], d.values[0]
	for _, v := range d.values[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// plainPage appends the dictionary page body: each value PLAIN (length
// and bytes).
func (d *stringDict) plainPage(dst []byte) []byte {
	for _, v := range d.values {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

// rowGroup is a row group being appended: the file's bytes from its
// start, where they land in the file, and its metadata so far.
type rowGroup struct {
	out   []byte
	start int   // the row group's first byte in out
	at    int64 // and in the file
	codec format.CompressionCodec
	md    format.RowGroup
}

// column starts a column chunk's metadata at the next byte.
func (g *rowGroup) column(typ format.Type, name string, enc ...format.Encoding) format.ColumnMetaData {
	return format.ColumnMetaData{
		Type: typ, Encoding: enc, PathInSchema: []string{name}, Codec: g.codec,
		NumValues: g.md.NumRows, DataPageOffset: g.offset(),
	}
}

func (g *rowGroup) offset() int64 { return g.at + int64(len(g.out)-g.start) }

// add adds a finished column chunk.
func (g *rowGroup) add(md format.ColumnMetaData) {
	start := md.DataPageOffset
	if md.DictionaryPageOffset > 0 {
		start = md.DictionaryPageOffset
	}
	g.md.Columns = append(g.md.Columns, format.ColumnChunk{FileOffset: start, MetaData: md})
	g.md.TotalByteSize += md.TotalUncompressedSize
	g.md.TotalCompressedSize += md.TotalCompressedSize
}

// appendRowGroup appends the row group of rows (at least one), starting at
// byte offset at of the file, to out, and returns out and the row
// group's metadata.
func (e *columnEncoder) appendRowGroup(out []byte, at int64, rows []Row) ([]byte, format.RowGroup, error) {
	g := &rowGroup{out: out, start: len(out), at: at, codec: e.codec, md: format.RowGroup{NumRows: int64(len(rows)), FileOffset: at}}
	steps := []func(*rowGroup, []Row) error{
		func(g *rowGroup, rows []Row) error { return e.strings(g, "sensor", &e.sensors, rows, false) },
		func(g *rowGroup, rows []Row) error { return e.strings(g, "signal", &e.signals, rows, true) },
		func(g *rowGroup, rows []Row) error { return e.int64s(g, "ts", rows, false) },
		e.modes,
		e.values,
		func(g *rowGroup, rows []Row) error { return e.int64s(g, "offset", rows, true) },
	}
	for _, step := range steps {
		if err := step(g, rows); err != nil {
			return out, format.RowGroup{}, err
		}
	}
	return g.out, g.md, nil
}

// strings appends a dictionary-encoded string column: sensor, or signal.
func (e *columnEncoder) strings(g *rowGroup, name string, d *stringDict, rows []Row, signal bool) error {
	d.reset()
	e.idx = e.idx[:0]
	for i := range rows {
		s := rows[i].Sensor
		if signal {
			s = rows[i].Signal
		}
		e.idx = append(e.idx, d.id(s))
	}
	md := g.column(format.ByteArray, name, format.Plain, format.RLEDictionary)
	md.DictionaryPageOffset = md.DataPageOffset
	e.body = d.plainPage(e.body[:0])
	if err := e.page(g, &md, format.DictionaryPage, len(d.values), format.Plain); err != nil {
		return err
	}
	md.DataPageOffset = g.offset()
	if err := dataPages(e, g, &md, e.idx, format.RLEDictionary, (&rle.DictionaryEncoding{}).EncodeInt32); err != nil {
		return err
	}
	if lo, hi := d.bounds(); len(lo)+len(hi) <= maxStringStats {
		md.Statistics = format.Statistics{MinValue: []byte(lo), MaxValue: []byte(hi)}
	}
	g.add(md)
	return nil
}

// maxStringStats bounds the bytes of a string column chunk's min and max
// together; larger ones are left out (as parquet-mr leaves them out), or
// long strings would grow every row group's footer entry by twice their
// length, past what the reader accepts (maxFooterBytes).
const maxStringStats = 4096

// int64s appends a DELTA_BINARY_PACKED int64 column: ts, or offset.
func (e *columnEncoder) int64s(g *rowGroup, name string, rows []Row, offset bool) error {
	e.i64 = e.i64[:0]
	for i := range rows {
		v := rows[i].TS
		if offset {
			v = rows[i].Offset
		}
		e.i64 = append(e.i64, v)
	}
	md := g.column(format.Int64, name, format.DeltaBinaryPacked)
	if err := dataPages(e, g, &md, e.i64, format.DeltaBinaryPacked, (&delta.BinaryPackedEncoding{}).EncodeInt64); err != nil {
		return err
	}
	md.Statistics = format.Statistics{MinValue: le64(uint64(slices.Min(e.i64))), MaxValue: le64(uint64(slices.Max(e.i64)))}
	g.add(md)
	return nil
}

// modes appends the mode column (DELTA_BINARY_PACKED int32).
func (e *columnEncoder) modes(g *rowGroup, rows []Row) error {
	e.i32 = e.i32[:0]
	for i := range rows {
		e.i32 = append(e.i32, rows[i].Mode)
	}
	md := g.column(format.Int32, "mode", format.DeltaBinaryPacked)
	if err := dataPages(e, g, &md, e.i32, format.DeltaBinaryPacked, (&delta.BinaryPackedEncoding{}).EncodeInt32); err != nil {
		return err
	}
	md.Statistics = format.Statistics{
		MinValue: binary.LittleEndian.AppendUint32(nil, uint32(slices.Min(e.i32))),
		MaxValue: binary.LittleEndian.AppendUint32(nil, uint32(slices.Max(e.i32))),
	}
	g.add(md)
	return nil
}

// values appends the value column (PLAIN double); its bounds leave NaN
// out (it has no place in an order).
func (e *columnEncoder) values(g *rowGroup, rows []Row) error {
	e.f64 = e.f64[:0]
	lo, hi, seen := 0.0, 0.0, false
	for i := range rows {
		v := rows[i].Value
		e.f64 = append(e.f64, v)
		switch {
		case math.IsNaN(v):
		case !seen:
			lo, hi, seen = v, v, true
		default:
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	md := g.column(format.Double, "value", format.Plain)
	if err := dataPages(e, g, &md, e.f64, format.Plain, (&plain.Encoding{}).EncodeDouble); err != nil {
		return err
	}
	if seen {
		md.Statistics = format.Statistics{MinValue: le64(math.Float64bits(lo)), MaxValue: le64(math.Float64bits(hi))}
	}
	g.add(md)
	return nil
}

// dataPages appends vals to g as data pages of at most pageValues values
// encoded by encode (an encoding of kind enc).
func dataPages[T any](e *columnEncoder, g *rowGroup, md *format.ColumnMetaData, vals []T, enc format.Encoding, encode func([]byte, []T) ([]byte, error)) error {
	for i := 0; i < len(vals); i += pageValues {
		page := vals[i:min(i+pageValues, len(vals))]
		var err error
		if e.body, err = encode(e.body[:0], page); err != nil {
			return err
		}
		if err := e.page(g, md, format.DataPageV2, len(page), enc); err != nil {
			return err
		}
	}
	return nil
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// page compresses e.body and appends it to g as a page of typ holding n
// values of enc, header first, and accounts for it in md.
func (e *columnEncoder) page(g *rowGroup, md *format.ColumnMetaData, typ format.PageType, n int, enc format.Encoding) error {
	switch e.codec {
	case format.Snappy:
		e.comp = s2.EncodeSnappy(e.comp[:cap(e.comp)], e.body)
	default:
		if e.zstd == nil {
			z, err := zstdEncoder(e.level)
			if err != nil {
				return err
			}
			e.zstd = z
		}
		e.comp = e.zstd.EncodeAll(e.body, e.comp[:0])
	}
	h := format.PageHeader{
		Type:                 typ,
		UncompressedPageSize: int32(len(e.body)),
		CompressedPageSize:   int32(len(e.comp)),
		CRC:                  int32(crc32.ChecksumIEEE(e.comp)),
	}
	if typ == format.DictionaryPage {
		h.DictionaryPageHeader = thrift.New(format.DictionaryPageHeader{NumValues: int32(n), Encoding: enc})
	} else {
		h.DataPageHeaderV2 = thrift.New(format.DataPageHeaderV2{
			NumValues: int32(n), NumRows: int32(n), Encoding: enc, IsCompressed: thrift.New(true),
		})
	}
	hdr, err := thrift.Marshal(new(thrift.CompactProtocol), &h)
	if err != nil {
		return err
	}
	g.out = append(append(g.out, hdr...), e.comp...)
	md.TotalUncompressedSize += int64(len(hdr) + len(e.body))
	md.TotalCompressedSize += int64(len(hdr) + len(e.comp))
	countPage(md, typ, enc)
	return nil
}

// zstdEncoders holds one encoder per level for the whole process, with
// the options of parquet-go's zstd codec (no checksum, zero frames). Its
// EncodeAll is safe for concurrent use and keeps GOMAXPROCS block
// encoders with their tables and history: writers share them instead of
// each allocating and clearing a few megabytes (a shard's writer and its
// records' encoder used to, at every shard assignment), and the garbage
// collector never drops them, as it did parquet-go's pooled encoders.
var zstdEncoders sync.Map // kzstd.EncoderLevel -> func() (*kzstd.Encoder, error)

func zstdEncoder(level kzstd.EncoderLevel) (*kzstd.Encoder, error) {
	f, ok := zstdEncoders.Load(level)
	if !ok {
		f, _ = zstdEncoders.LoadOrStore(level, sync.OnceValues(func() (*kzstd.Encoder, error) {
			return kzstd.NewWriter(nil,
				kzstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
				kzstd.WithEncoderLevel(level),
				kzstd.WithZeroFrames(true),
				kzstd.WithEncoderCRC(false),
			)
		}))
	}
	return f.(func() (*kzstd.Encoder, error))()
}

// countPage counts a page in md's encoding statistics.
func countPage(md *format.ColumnMetaData, typ format.PageType, enc format.Encoding) {
	for i := range md.EncodingStats {
		if s := &md.EncodingStats[i]; s.PageType == typ && s.Encoding == enc {
			s.Count++
			return
		}
	}
	md.EncodingStats = append(md.EncodingStats, format.PageEncodingStats{PageType: typ, Encoding: enc, Count: 1})
}
