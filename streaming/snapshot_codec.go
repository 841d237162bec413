package streaming

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/tflo-io/tflo/internal/wire"
)

// Snapshot encoding (SnapshotFormatVersion 1). Integers are varints unless
// noted; "bytes" is a uvarint length followed by that many bytes.
//
//	magic            4 bytes "TFSN"
//	format version   uvarint (SnapshotFormatVersion)
//	cursor type      bytes
//	cursor           bytes
//	epoch            uvarint
//	operator count   uvarint, then per operator:
//	                   node bytes | operator bytes | type version uvarint
//	schema fp        bytes
//	created          varint (zig-zag), unix nanoseconds
//	data             bytes
//	checksum         4 bytes little-endian CRC32C (Castagnoli) of everything above
//
// The checksum covers the whole encoding, so a flipped bit anywhere or a
// truncated tail is refused with ErrCorrupt before any field is trusted.

// snapshotMagic opens every encoded snapshot.
var snapshotMagic = [4]byte{'T', 'F', 'S', 'N'}

// minSnapshotLen is the shortest possible encoding: magic, a one-byte
// version, seven one-byte fields (all empty or zero) and the checksum.
const minSnapshotLen = 4 + 1 + 7 + 4

// MarshalSnapshot encodes s in the current snapshot format
// (SnapshotFormatVersion), checksummed with CRC32C. s.Meta.FormatVersion is
// ignored: the encoding records the version that wrote it, and
// UnmarshalSnapshot reports that version in Meta.FormatVersion.
func MarshalSnapshot(s Snapshot) []byte {
	return AppendSnapshot(make([]byte, 0, SnapshotEncodedLen(s)), s)
}

// SnapshotEncodedLen returns the exact length of MarshalSnapshot(s), for
// callers that size buffers up front.
func SnapshotEncodedLen(s Snapshot) int {
	n := 4 + uvarintLen(SnapshotFormatVersion)
	n += bytesLen(len(s.Meta.CursorType)) + bytesLen(len(s.Meta.Cursor))
	n += uvarintLen(uint64(s.Meta.Epoch))
	n += uvarintLen(uint64(len(s.Meta.Operators)))
	for _, op := range s.Meta.Operators {
		n += bytesLen(len(op.Node)) + bytesLen(len(op.Operator)) + uvarintLen(uint64(op.TypeVersion))
	}
	n += bytesLen(len(s.Meta.SchemaFingerprint))
	n += varintLen(s.Meta.CreatedUnixNano)
	n += bytesLen(len(s.Data))
	return n + 4
}

// AppendSnapshot appends the encoding of s to dst and returns the extended
// slice; see MarshalSnapshot.
func AppendSnapshot(dst []byte, s Snapshot) []byte {
	start := len(dst)
	dst = append(dst, snapshotMagic[:]...)
	dst = binary.AppendUvarint(dst, SnapshotFormatVersion)
	dst = wire.AppendString(dst, s.Meta.CursorType)
	dst = wire.AppendBytes(dst, s.Meta.Cursor)
	dst = binary.AppendUvarint(dst, uint64(s.Meta.Epoch))
	dst = binary.AppendUvarint(dst, uint64(len(s.Meta.Operators)))
	for _, op := range s.Meta.Operators {
		dst = wire.AppendString(dst, op.Node)
		dst = wire.AppendString(dst, op.Operator)
		dst = binary.AppendUvarint(dst, uint64(op.TypeVersion))
	}
	dst = wire.AppendString(dst, s.Meta.SchemaFingerprint)
	dst = binary.AppendVarint(dst, s.Meta.CreatedUnixNano)
	dst = wire.AppendBytes(dst, s.Data)
	sum := crc32.Checksum(dst[start:], wire.Castagnoli)
	return binary.LittleEndian.AppendUint32(dst, sum)
}

// UnmarshalSnapshot decodes an encoding made by MarshalSnapshot. Bytes that
// fail the checksum, are truncated, carry an unknown format version or do
// not parse are refused with an error wrapping ErrCorrupt that says what is
// wrong; stores add the key ("snapshot key \"a/b\": ..."). The result does
// not alias b. Zero-length byte fields decode as nil and an empty operator
// list as nil.
func UnmarshalSnapshot(b []byte) (Snapshot, error) {
	if len(b) < minSnapshotLen {
		return Snapshot{}, fmt.Errorf("snapshot: %d bytes is shorter than the smallest encoding (%d): truncated: %w", len(b), minSnapshotLen, ErrCorrupt)
	}
	if [4]byte(b[:4]) != snapshotMagic {
		return Snapshot{}, fmt.Errorf("snapshot: magic %q is not %q: %w", b[:4], snapshotMagic[:], ErrCorrupt)
	}
	body := b[:len(b)-4]
	want := binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, wire.Castagnoli); got != want {
		return Snapshot{}, fmt.Errorf("snapshot: checksum mismatch: stored crc32c %08x, computed %08x over %d bytes (corrupt or truncated): %w", want, got, len(body), ErrCorrupt)
	}
	r := wire.Reader{B: body, Off: 4}
	ver := r.Uvarint()
	if r.Err == nil && ver != SnapshotFormatVersion {
		return Snapshot{}, fmt.Errorf("snapshot: format version %d, this build reads %d: %w", ver, SnapshotFormatVersion, ErrCorrupt)
	}
	var s Snapshot
	s.Meta.FormatVersion = uint32(ver)
	s.Meta.CursorType = r.Str()
	s.Meta.Cursor = cloneOrNil(r.Bytes())
	s.Meta.Epoch = Epoch(r.Uvarint())
	nops := r.Uvarint()
	// Each operator takes at least three bytes; refuse counts the
	// remaining bytes cannot hold before allocating for them.
	if r.Err == nil && nops > uint64(len(body)-r.Off)/3 {
		return Snapshot{}, fmt.Errorf("snapshot: operator count %d does not fit in the remaining %d bytes: %w", nops, len(body)-r.Off, ErrCorrupt)
	}
	if nops > 0 && r.Err == nil {
		s.Meta.Operators = make([]OperatorInfo, 0, nops)
		for i := uint64(0); i < nops && r.Err == nil; i++ {
			var op OperatorInfo
			op.Node = r.Str()
			op.Operator = r.Str()
			tv := r.Uvarint()
			if r.Err == nil && tv > 1<<32-1 {
				return Snapshot{}, fmt.Errorf("snapshot: operator %q type version %d overflows uint32: %w", op.Node, tv, ErrCorrupt)
			}
			op.TypeVersion = uint32(tv)
			s.Meta.Operators = append(s.Meta.Operators, op)
		}
	}
	s.Meta.SchemaFingerprint = r.Str()
	s.Meta.CreatedUnixNano = r.Varint()
	s.Data = cloneOrNil(r.Bytes())
	if r.Err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(body) {
		return Snapshot{}, fmt.Errorf("snapshot: %d trailing bytes before the checksum: %w", len(body)-r.Off, ErrCorrupt)
	}
	return s, nil
}

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	ux := uint64(v) << 1
	if v < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }
