package streaming

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/tflo-io/tflo/internal/wire"
)

// Snapshot encoding (SnapshotFormatVersion 1, SnapshotFormatVersionDropped
// 2). Integers are varints unless noted; "bytes" is a uvarint length
// followed by that many bytes.
//
//	magic            4 bytes "TFSN"
//	format version   uvarint (1, or 2 when there are dropped nodes)
//	cursor type      bytes
//	cursor           bytes
//	epoch            uvarint
//	operator count   uvarint, then per operator:
//	                   node bytes | operator bytes | type version uvarint
//	dropped count    uvarint, then per dropped node: node bytes (version 2 only)
//	schema fp        bytes
//	created          varint (zig-zag), unix nanoseconds
//	data             bytes
//	checksum         4 bytes little-endian CRC32C (Castagnoli) of everything above
//
// The checksum covers the whole encoding, so a flipped bit anywhere or a
// truncated tail is refused with ErrCorrupt before any field is trusted.
// Version 1 is written whenever it can say everything (no dropped nodes),
// so the bytes of such snapshots are those every earlier build wrote and
// reads; version 2 adds only the dropped nodes.

// snapshotMagic opens every encoded snapshot.
var snapshotMagic = [4]byte{'T', 'F', 'S', 'N'}

// minSnapshotLen is the shortest possible encoding: magic, a one-byte
// version, seven one-byte fields (all empty or zero) and the checksum.
const minSnapshotLen = 4 + 1 + 7 + 4

// MarshalSnapshot encodes s in snapshot format SnapshotFormatVersion, or
// SnapshotFormatVersionDropped when s.Meta.DroppedNodes is not empty,
// checksummed with CRC32C. s.Meta.FormatVersion is
// ignored: the encoding records the version that wrote it, and
// UnmarshalSnapshot reports that version in Meta.FormatVersion.
func MarshalSnapshot(s Snapshot) []byte {
	return AppendSnapshot(make([]byte, 0, SnapshotEncodedLen(s)), s)
}

// SnapshotEncodedLen returns the exact length of MarshalSnapshot(s), for
// callers that size buffers up front.
func SnapshotEncodedLen(s Snapshot) int {
	n := 4 + uvarintLen(snapshotVersionOf(s.Meta))
	n += bytesLen(len(s.Meta.CursorType)) + bytesLen(len(s.Meta.Cursor))
	n += uvarintLen(uint64(s.Meta.Epoch))
	n += uvarintLen(uint64(len(s.Meta.Operators)))
	for _, op := range s.Meta.Operators {
		n += bytesLen(len(op.Node)) + bytesLen(len(op.Operator)) + uvarintLen(uint64(op.TypeVersion))
	}
	if len(s.Meta.DroppedNodes) > 0 {
		n += uvarintLen(uint64(len(s.Meta.DroppedNodes)))
		for _, d := range s.Meta.DroppedNodes {
			n += bytesLen(len(d))
		}
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
	dst = binary.AppendUvarint(dst, snapshotVersionOf(s.Meta))
	dst = wire.AppendString(dst, s.Meta.CursorType)
	dst = wire.AppendBytes(dst, s.Meta.Cursor)
	dst = binary.AppendUvarint(dst, uint64(s.Meta.Epoch))
	dst = binary.AppendUvarint(dst, uint64(len(s.Meta.Operators)))
	for _, op := range s.Meta.Operators {
		dst = wire.AppendString(dst, op.Node)
		dst = wire.AppendString(dst, op.Operator)
		dst = binary.AppendUvarint(dst, uint64(op.TypeVersion))
	}
	if len(s.Meta.DroppedNodes) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(s.Meta.DroppedNodes)))
		for _, d := range s.Meta.DroppedNodes {
			dst = wire.AppendString(dst, d)
		}
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
	if r.Err == nil && ver != SnapshotFormatVersion && ver != SnapshotFormatVersionDropped {
		return Snapshot{}, fmt.Errorf("snapshot: format version %d, this build reads %d and %d: %w", ver, SnapshotFormatVersion, SnapshotFormatVersionDropped, ErrCorrupt)
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
	if ver == SnapshotFormatVersionDropped && r.Err == nil {
		ndropped := r.Uvarint()
		// Each name takes at least a byte, and a version 2 snapshot
		// records at least one.
		if r.Err == nil && (ndropped == 0 || ndropped > uint64(len(body)-r.Off)) {
			return Snapshot{}, fmt.Errorf("snapshot: format version %d with dropped node count %d (at least 1, at most what the remaining %d bytes hold): %w", ver, ndropped, len(body)-r.Off, ErrCorrupt)
		}
		s.Meta.DroppedNodes = make([]string, 0, ndropped)
		for i := uint64(0); i < ndropped && r.Err == nil; i++ {
			s.Meta.DroppedNodes = append(s.Meta.DroppedNodes, r.Str())
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

// snapshotVersionOf is the format version MarshalSnapshot writes for a
// snapshot of metadata m: the oldest that can say it all.
func snapshotVersionOf(m SnapshotMeta) uint64 {
	if len(m.DroppedNodes) > 0 {
		return SnapshotFormatVersionDropped
	}
	return SnapshotFormatVersion
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
