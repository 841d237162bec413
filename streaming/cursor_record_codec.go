package streaming

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/tflo-io/tflo/internal/wire"
)

// CursorRecord encoding, used by stores that persist bytes:
//
//	magic          4 bytes "TFCR"
//	version        uvarint (cursorRecordVersion)
//	type           bytes (uvarint length, then the bytes)
//	cursor         bytes
//	epoch          uvarint
//	checkpoint id  uvarint
//	checksum       4 bytes little-endian CRC32C of everything above

var cursorRecordMagic = [4]byte{'T', 'F', 'C', 'R'}

const cursorRecordVersion = 1

// MarshalCursorRecord encodes rec, checksummed with CRC32C.
func MarshalCursorRecord(rec CursorRecord) []byte {
	dst := make([]byte, 0, 4+1+bytesLen(len(rec.Type))+bytesLen(len(rec.Cursor))+2*binary.MaxVarintLen64+4)
	dst = append(dst, cursorRecordMagic[:]...)
	dst = binary.AppendUvarint(dst, cursorRecordVersion)
	dst = wire.AppendString(dst, rec.Type)
	dst = wire.AppendBytes(dst, rec.Cursor)
	dst = binary.AppendUvarint(dst, uint64(rec.Epoch))
	dst = binary.AppendUvarint(dst, rec.CheckpointID)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, wire.Castagnoli))
}

// UnmarshalCursorRecord decodes an encoding made by MarshalCursorRecord.
// Corrupt, truncated or unknown-version bytes are refused with an error
// wrapping ErrCorrupt; stores add the key. The result does not alias b; an
// empty Cursor decodes as nil.
func UnmarshalCursorRecord(b []byte) (CursorRecord, error) {
	const minLen = 4 + 1 + 4 + 4
	if len(b) < minLen {
		return CursorRecord{}, fmt.Errorf("cursor record: %d bytes is shorter than the smallest encoding (%d): truncated: %w", len(b), minLen, ErrCorrupt)
	}
	if [4]byte(b[:4]) != cursorRecordMagic {
		return CursorRecord{}, fmt.Errorf("cursor record: magic %q is not %q: %w", b[:4], cursorRecordMagic[:], ErrCorrupt)
	}
	body := b[:len(b)-4]
	want := binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, wire.Castagnoli); got != want {
		return CursorRecord{}, fmt.Errorf("cursor record: checksum mismatch: stored crc32c %08x, computed %08x over %d bytes (corrupt or truncated): %w", want, got, len(body), ErrCorrupt)
	}
	r := wire.Reader{B: body, Off: 4}
	if ver := r.Uvarint(); r.Err == nil && ver != cursorRecordVersion {
		return CursorRecord{}, fmt.Errorf("cursor record: format version %d, this build reads %d: %w", ver, cursorRecordVersion, ErrCorrupt)
	}
	var rec CursorRecord
	rec.Type = r.Str()
	rec.Cursor = cloneOrNil(r.Bytes())
	rec.Epoch = Epoch(r.Uvarint())
	rec.CheckpointID = r.Uvarint()
	if r.Err != nil {
		return CursorRecord{}, fmt.Errorf("cursor record: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(body) {
		return CursorRecord{}, fmt.Errorf("cursor record: %d trailing bytes before the checksum: %w", len(body)-r.Off, ErrCorrupt)
	}
	return rec, nil
}

// CheckCursorFence returns an error wrapping ErrFenced when next may not
// replace stored: next's epoch is older than the one stored under key.
// Stores call it inside whatever makes their read-compare-write atomic.
func CheckCursorFence(key []byte, stored, next CursorRecord) error {
	if next.Epoch < stored.Epoch {
		return fmt.Errorf("cursor key %q: writer epoch %d is older than the stored epoch %d: %w", key, next.Epoch, stored.Epoch, ErrFenced)
	}
	return nil
}
