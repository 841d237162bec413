package parquet

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"

	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/streaming"
)

// A pre-commit record is what a RollingWriter writes at a checkpoint's
// cut: everything needed to finish the shard's files exactly as they
// stood at the cut, whoever restores them. It is one object:
//
//	"TFLOREC1"
//	uint32 length, JSON header (recordHeader)
//	uint32 length, tail bytes: the open file's encoded bytes not yet uploaded
//	               nor in a tail segment
//	uint32 length, tail rows: the open file's rows not yet encoded, as an
//	               archive file (fingerprint and checksum included)
//	uint32 CRC-32C of everything before it
//
// All integers are little-endian.
//
// The open file's row-group metadata is not in the record: it grows with
// the file (a row group per checkpoint or so, a kilobyte each), and
// re-encoding all of it at every checkpoint made a pre-commit cost
// proportional to the file's age. Each pre-commit instead writes the row
// groups added since the previous one as a row-group segment, an object
// of its own beside the open file (segmentName), and the record lists the
// segments' ends (openInfo.Segments): the segments are immutable, so a
// record stays a few hundred bytes plus its tail. A record whose
// RowGroups field is set (written by older workers) holds the row groups
// before its segments inline. A segment is
//
//	"TFLORGS1"
//	the compact thrift encoding of FileMetaData{RowGroups: ...}
//	uint32 CRC-32C of everything before it
//
// The open file's encoded bytes not yet uploaded (fewer than a part: S3
// takes no part under 5 MiB but the last) go the same way: each
// pre-commit writes those added since the previous one as a tail segment
// (tailSegmentName, named by its file offsets) and the record lists the
// segments' ends (openInfo.TailSegments); the record's own tail bytes are
// those after the last segment (none, but in records of older workers).
// Carried in the record, they were written again at every checkpoint
// until the part was uploaded. Once it is, the segments are deleted after
// a record that no longer lists them is committed. A tail segment is
//
//	"TFLOTAIL"
//	the bytes
//	uint32 CRC-32C of everything before it

const recordMagic = "TFLOREC1"

// maxRecordBytes bounds a record (the tail bytes stay below one part, the
// tail rows below a row group).
const maxRecordBytes = 256 << 20

type recordHeader struct {
	Pipeline string       `json:"pipeline"`
	Shard    int32        `json:"shard"`
	Epoch    uint64       `json:"epoch"`
	Cut      int64        `json:"cut"`
	Sealed   []sealedInfo `json:"sealed,omitempty"`
	Open     *openInfo    `json:"open,omitempty"`
}

// uploadInfo is a file's upload: its hidden name, the upload id ("" until
// the first part) and the parts uploaded.
type uploadInfo struct {
	Staging  string `json:"staging"`
	UploadID string `json:"upload_id,omitempty"`
	Parts    []Part `json:"parts,omitempty"`
}

// sealedInfo is a finished file waiting for the commit that publishes it.
// Its every byte is uploaded.
type sealedInfo struct {
	uploadInfo
	Name     string `json:"name"`
	Rows     int64  `json:"rows"`
	Size     int64  `json:"size"`
	SealedAt int64  `json:"sealed_at"`
}

// openInfo is the open file at the cut.
type openInfo struct {
	uploadInfo
	Epoch uint64 `json:"epoch"`
	Size  int64  `json:"size"`
	CRC   uint32 `json:"crc"`
	Rows  int64  `json:"rows"`
	First int64  `json:"first"`
	Last  int64  `json:"last"`
	// RowGroups holds row groups inline (records of older workers).
	RowGroups []byte `json:"row_groups,omitempty"`
	// Segments are the ends (row-group counts) of the file's row-group
	// segments, in order: segment i holds row groups Segments[i-1] (0 for
	// the first) to Segments[i], after the inline ones.
	Segments []int `json:"row_group_segments,omitempty"`
	// TailSegments are the ends (file offsets) of the file's tail
	// segments, in order: segment i holds its bytes TailSegments[i-1]
	// (for the first, the end of the parts) to TailSegments[i]; the
	// record's tail bytes follow the last.
	TailSegments []int64 `json:"tail_segments,omitempty"`
}

type record struct {
	recordHeader
	tailBytes []byte
	tailRows  []Row
}

// encodeRecord returns the record's bytes; rows are encoded with b.
func encodeRecord(rec *record, rows *fileBuilder) ([]byte, error) {
	hdr, err := json.Marshal(rec.recordHeader)
	if err != nil {
		return nil, err
	}
	var tail []byte
	if len(rec.tailRows) > 0 {
		if tail, err = encodeRowsFile(rows, rec.tailRows); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	buf.WriteString(recordMagic)
	for _, sec := range [][]byte{hdr, rec.tailBytes, tail} {
		buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(sec))))
		buf.Write(sec)
	}
	buf.Write(binary.LittleEndian.AppendUint32(nil, crc32.Checksum(buf.Bytes(), castagnoli)))
	if buf.Len() > maxRecordBytes {
		return nil, fmt.Errorf("pre-commit record of %d bytes exceeds %d", buf.Len(), maxRecordBytes)
	}
	return buf.Bytes(), nil
}

// encodeRowsFile encodes rows as a complete archive file with b.
func encodeRowsFile(b *fileBuilder, rows []Row) ([]byte, error) {
	out := append([]byte(nil), b.start()...)
	body, err := b.appendRows(rows)
	if err != nil {
		return nil, err
	}
	out = append(out, body...)
	tail, err := b.footer()
	if err != nil {
		return nil, err
	}
	return append(out, tail...), nil
}

// decodeRecord decodes and checks a record read from the archive object
// name. Errors name the object and wrap streaming.ErrCorrupt.
func decodeRecord(ctx context.Context, name string, data []byte) (*record, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("pre-commit record %s: %s: %w", name, fmt.Sprintf(format, args...), streaming.ErrCorrupt)
	}
	rest, err := checkedBody(data, recordMagic, 12)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	var secs [3][]byte
	for i := range secs {
		if len(rest) < 4 {
			return nil, corrupt("truncated at section %d", i)
		}
		n := binary.LittleEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, corrupt("section %d of %d bytes, %d left", i, n, len(rest)-4)
		}
		secs[i], rest = rest[4:4+n], rest[4+n:]
	}
	if len(rest) != 0 {
		return nil, corrupt("%d trailing bytes", len(rest))
	}
	rec := &record{tailBytes: secs[1]}
	if err := json.Unmarshal(secs[0], &rec.recordHeader); err != nil {
		return nil, corrupt("header: %v", err)
	}
	if err := checkRecord(rec); err != nil {
		return nil, corrupt("%v", err)
	}
	if len(secs[2]) > 0 {
		rows, err := decodeRowsFile(ctx, name+" (tail rows)", secs[2])
		if err != nil {
			return nil, err
		}
		rec.tailRows = rows
	}
	return rec, nil
}

// checkRecord checks a decoded header's internal consistency.
func checkRecord(rec *record) error {
	if err := validatePipeline(rec.Pipeline); err != nil {
		return err
	}
	for _, s := range rec.Sealed {
		end, err := partsEnd(s.Parts)
		if err != nil {
			return fmt.Errorf("sealed file %s: %w", s.Name, err)
		}
		if end != s.Size || s.UploadID == "" {
			return fmt.Errorf("sealed file %s: %d bytes in parts of upload %q, %d in the file", s.Name, end, s.UploadID, s.Size)
		}
		if _, err := ParseFileName(s.Name); err != nil {
			return err
		}
	}
	if o := rec.Open; o != nil {
		end, err := partsEnd(o.Parts)
		if err != nil {
			return fmt.Errorf("open file %s: %w", o.Staging, err)
		}
		tailEnd := end
		for _, e := range o.TailSegments {
			if e <= tailEnd {
				return fmt.Errorf("open file %s: tail segment ends %v do not increase from the parts' end %d", o.Staging, o.TailSegments, end)
			}
			tailEnd = e
		}
		if tailEnd+int64(len(rec.tailBytes)) != o.Size || (len(o.Parts) > 0 && o.UploadID == "") {
			return fmt.Errorf("open file %s: %d bytes in parts, %d in tail segments and %d in the record, %d in the file", o.Staging, end, tailEnd-end, len(rec.tailBytes), o.Size)
		}
		if o.Size < int64(len(magic)) || o.Rows < 0 {
			return fmt.Errorf("open file %s: %d bytes, %d rows", o.Staging, o.Size, o.Rows)
		}
		prev := 0
		for _, end := range o.Segments {
			if end <= prev {
				return fmt.Errorf("open file %s: row-group segment ends %v do not increase", o.Staging, o.Segments)
			}
			prev = end
		}
	}
	return nil
}

const segmentMagic = "TFLORGS1"

// encodeSegment returns the bytes of a row-group segment holding rgs.
func encodeSegment(rgs []format.RowGroup) ([]byte, error) {
	enc, err := encodeRowGroups(rgs)
	if err != nil {
		return nil, err
	}
	return checkedFrame(segmentMagic, enc), nil
}

// decodeSegment decodes and checks the row-group segment read from the
// archive object name, which must hold n row groups. Errors name the
// object and wrap streaming.ErrCorrupt.
func decodeSegment(name string, data []byte, n int) ([]format.RowGroup, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("row-group segment %s: %s: %w", name, fmt.Sprintf(format, args...), streaming.ErrCorrupt)
	}
	body, err := checkedBody(data, segmentMagic, 0)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	rgs, err := decodeRowGroups(body)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	if len(rgs) != n {
		return nil, corrupt("%d row groups, the record expects %d", len(rgs), n)
	}
	return rgs, nil
}

const tailSegmentMagic = "TFLOTAIL"

// encodeTailSegment returns the bytes of a tail segment holding tail.
func encodeTailSegment(tail []byte) []byte { return checkedFrame(tailSegmentMagic, tail) }

// checkedFrame returns magic, body and the CRC-32C of both: what
// checkedBody checks and takes apart.
func checkedFrame(magic string, body []byte) []byte {
	out := make([]byte, 0, len(magic)+len(body)+4)
	out = append(append(out, magic...), body...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// decodeTailSegment checks the tail segment read from the archive object
// name, which must hold n bytes, and returns them. Errors name the object
// and wrap streaming.ErrCorrupt.
func decodeTailSegment(name string, data []byte, n int64) ([]byte, error) {
	body, err := checkedBody(data, tailSegmentMagic, 0)
	if err == nil && int64(len(body)) != n {
		err = fmt.Errorf("%d bytes, the record expects %d", len(body), n)
	}
	if err != nil {
		return nil, fmt.Errorf("tail segment %s: %v: %w", name, err, streaming.ErrCorrupt)
	}
	return body, nil
}

// checkedBody checks that data starts with magic, holds at least min
// bytes after it and ends with the CRC-32C of everything before, and
// returns the bytes between the magic and the checksum.
func checkedBody(data []byte, magic string, min int) ([]byte, error) {
	if len(data) < len(magic)+min+4 || string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("no %s object (%d bytes)", magic, len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum %08x, content hashes to %08x", sum, got)
	}
	return body[len(magic):], nil
}

// decodeRowsFile reads every row of an archive file held in memory
// through the checked reader.
func decodeRowsFile(ctx context.Context, name string, data []byte) ([]Row, error) {
	a := NewMemArchive()
	a.objs[name] = memObj{data: data}
	r := &Reader{archive: a, cfg: defaultReaderConfig()}
	var rows []Row
	for e, err := range r.File(ctx, FileInfo{Name: name, SkipThrough: -1}, 0) {
		if err != nil {
			return nil, err
		}
		rows = append(rows, e.Row)
	}
	return rows, nil
}
