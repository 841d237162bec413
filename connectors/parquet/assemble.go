package parquet

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// A fileBuilder assembles one archive file a row group at a time, so a
// file can grow across checkpoints, be uploaded in parts and be finished
// (footer written) later, even by another process after a crash: its
// whole state (fileState) is a few numbers and the row groups' metadata.
//
// Each batch of rows is encoded column by column (columnEncoder) as row
// groups at the offsets where they land in the file. The footer is built
// from the collected row-group metadata and the schema part of
// parquet-go's own footer (template). Files are byte-identical whoever
// assembles them from the same rows and batches.
type fileBuilder struct {
	enc          *columnEncoder
	rowGroupRows int64
	out          []byte // appendRows's result, reused
	st           fileState
}

// fileState is what it takes to continue or finish a file: its size and
// running checksum, its rows and offsets, and its row groups' metadata
// (offsets already in the assembled file's coordinates).
type fileState struct {
	Size  int64  // bytes so far, the leading magic included
	CRC   uint32 // CRC-32C of those bytes
	Rows  int64
	First int64 // source offset of the first row; -1 while empty
	Last  int64
	// RowGroups is the metadata of the row groups written so far.
	RowGroups []format.RowGroup
}

// template is the schema part of every footer this package assembles,
// taken once from parquet-go's own encoding of the schema.
var template = sync.OnceValues(func() (format.FileMetaData, error) {
	var buf bytes.Buffer
	w := pq.NewGenericWriter[Row](&buf, Schema(), pq.CreatedBy("tflo", "archive-v1", ""))
	if err := w.Close(); err != nil {
		return format.FileMetaData{}, err
	}
	md, err := decodeFooter(buf.Bytes())
	if err != nil {
		return format.FileMetaData{}, err
	}
	return format.FileMetaData{Version: md.Version, Schema: md.Schema, CreatedBy: md.CreatedBy, ColumnOrders: md.ColumnOrders}, nil
})

// decodeFooter decodes the footer of an encoded file held in memory.
func decodeFooter(file []byte) (format.FileMetaData, error) {
	var md format.FileMetaData
	if len(file) < 12 {
		return md, errors.New("encoded file too short")
	}
	n := int(binary.LittleEndian.Uint32(file[len(file)-8:]))
	if n > len(file)-12 {
		return md, errors.New("encoded file footer length out of range")
	}
	err := thrift.Unmarshal(new(thrift.CompactProtocol), file[len(file)-8-n:len(file)-8], &md)
	return md, err
}

const magic = "PAR1"

func newFileBuilder(cfg writerConfig) *fileBuilder {
	return &fileBuilder{enc: newColumnEncoder(cfg.compression, cfg.zstdLevel), rowGroupRows: cfg.rowGroupRows, st: fileState{First: -1}}
}

// start begins a new file and returns its first bytes (the magic).
func (b *fileBuilder) start() []byte {
	b.st = fileState{Size: int64(len(magic)), CRC: crc32.Checksum([]byte(magic), castagnoli), First: -1}
	return []byte(magic)
}

// resume continues a file from a recorded state.
func (b *fileBuilder) resume(st fileState) { b.st = st }

// state returns the file's state; the row groups are shared, not copied.
func (b *fileBuilder) state() fileState { return b.st }

// appendRows encodes rows (in source order, at least one) as row groups
// of the file, rowGroupRows rows each (the last one fewer, and any whose
// strings would make too large a dictionary, see rowGroupLen), and returns
// the bytes to append to it; the slice is valid until the next call.
func (b *fileBuilder) appendRows(rows []Row) ([]byte, error) {
	if len(rows) == 0 {
		return nil, errors.New("no rows to encode")
	}
	body := b.out[:0]
	for i := 0; i < len(rows); {
		batch := rows[i : i+rowGroupLen(rows[i:], int(b.rowGroupRows))]
		i += len(batch)
		var rg format.RowGroup
		var err error
		if body, rg, err = b.enc.appendRowGroup(body, b.st.Size+int64(len(body)), batch); err != nil {
			return nil, fmt.Errorf("encode row group: %w", err)
		}
		rg.Ordinal = int16(len(b.st.RowGroups))
		b.st.RowGroups = append(b.st.RowGroups, rg)
		b.st.Rows += rg.NumRows
	}
	b.out = body
	b.st.Size += int64(len(body))
	b.st.CRC = crc32.Update(b.st.CRC, castagnoli, body)
	if b.st.First < 0 {
		b.st.First = rows[0].Offset
	}
	b.st.Last = rows[len(rows)-1].Offset
	return body, nil
}

// maxDictBytes bounds the string bytes of one row group's rows: a
// dictionary page holds at most those of its column, and the reader
// refuses pages larger than maxPageBytes.
const maxDictBytes = maxPageBytes / 2

// MaxStringBytes is the longest sensor id or signal name the writers
// take: a page holding one such string (with its 4-byte length) stays
// within the reader's page bound (maxPageBytes).
const MaxStringBytes = maxPageBytes - 4

// checkRowSize reports a row whose strings would make a page the reader
// refuses (ErrRowTooLarge); i is the row's index in its batch.
func checkRowSize(i int, r Row) error {
	for _, f := range []struct {
		name string
		n    int
	}{{"sensor id", len(r.Sensor)}, {"signal name", len(r.Signal)}} {
		if f.n > MaxStringBytes {
			return fmt.Errorf("row %d (offset %d) has a %s of %d bytes, over the %d a page the reader accepts holds: %w", i, r.Offset, f.name, f.n, MaxStringBytes, ErrRowTooLarge)
		}
	}
	return nil
}

// rowGroupLen returns how many of rows (at least one) the next row group
// takes: at most limit, and no more than keep its strings within
// maxDictBytes.
func rowGroupLen(rows []Row, limit int) int {
	n, size := 0, 0
	for n < min(limit, len(rows)) {
		size += 8 + len(rows[n].Sensor) + len(rows[n].Signal)
		if size > maxDictBytes && n > 0 {
			break
		}
		n++
	}
	return n
}

// footer returns the file's last bytes: the footer (schema, row groups,
// fingerprint, whole-file checksum), its length and the magic. The state
// afterwards describes the finished file.
func (b *fileBuilder) footer() ([]byte, error) {
	tmpl, err := template()
	if err != nil {
		return nil, fmt.Errorf("archive schema: %w", err)
	}
	md := tmpl
	md.NumRows = b.st.Rows
	md.RowGroups = b.st.RowGroups
	md.KeyValueMetadata = []format.KeyValue{
		{Key: FingerprintKey, Value: SchemaFingerprint()},
		{Key: ChecksumKey, Value: checksumPrefix + checksumPlaceholder},
	}
	enc, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
	if err != nil {
		return nil, fmt.Errorf("encode footer: %w", err)
	}
	tail := binary.LittleEndian.AppendUint32(enc, uint32(len(enc)))
	tail = append(tail, magic...)
	sum := crc32.Update(b.st.CRC, castagnoli, tail)
	i := bytes.LastIndex(tail, []byte(checksumPrefix+checksumPlaceholder))
	if i < 0 {
		return nil, errors.New("checksum placeholder missing from the footer")
	}
	hex.Encode(tail[i+len(checksumPrefix):], binary.BigEndian.AppendUint32(nil, sum))
	b.st.Size += int64(len(tail))
	b.st.CRC = sum
	return tail, nil
}

// encodeRowGroups returns the compact thrift encoding of row groups' metadata.
func encodeRowGroups(rgs []format.RowGroup) ([]byte, error) {
	return thrift.Marshal(new(thrift.CompactProtocol), &format.FileMetaData{RowGroups: rgs})
}

// decodeRowGroups reverses encodeRowGroups after checking the encoding's
// shape (the bytes come from an archive object).
func decodeRowGroups(b []byte) ([]format.RowGroup, error) {
	n, err := walkThrift(b, footerBudgetFactor*int64(len(b))+1<<20)
	if err != nil {
		return nil, err
	}
	if n != len(b) {
		return nil, fmt.Errorf("%d trailing bytes after the row groups", len(b)-n)
	}
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), b, &md); err != nil {
		return nil, err
	}
	return md.RowGroups, nil
}
