// Package wire reads and writes the varint framing tflo's binary formats
// share (state blobs, snapshots, cursors, checkpoint manifests, the S3
// store's segments and manifests): uvarints, zigzag varints, fixed-width
// padded uvarints, length-prefixed byte strings, and the CRC32C table of
// the formats that carry a checksum.
//
// A Reader's first error sticks: later reads return zero values, so a
// decoder reads a whole record and checks Err once. Every length is
// checked against the bytes left, so corrupt input can neither panic nor
// make a decoder allocate without bound.
package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Castagnoli is the CRC32C table the formats that carry a checksum share.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendString appends s as a length-prefixed string (what Reader.Str
// reads).
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendBytes appends b as a length-prefixed byte string (what
// Reader.Bytes reads).
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Reader decodes B from Off. The zero value reads nothing; set B (and Off
// to skip a header).
type Reader struct {
	B   []byte
	Off int
	Err error // the first error, naming the byte offset
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B[r.Off:])
	if n <= 0 {
		r.Err = fmt.Errorf("truncated or overlong varint at byte %d", r.Off)
		return 0
	}
	r.Off += n
	return v
}

// Varint reads a zigzag-encoded signed varint.
func (r *Reader) Varint() int64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Varint(r.B[r.Off:])
	if n <= 0 {
		r.Err = fmt.Errorf("truncated or overlong varint at byte %d", r.Off)
		return 0
	}
	r.Off += n
	return v
}

// PaddedUvarint reads a uvarint written by PutPaddedUvarint into 5 bytes.
func (r *Reader) PaddedUvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	if len(r.B)-r.Off < 5 {
		r.Err = fmt.Errorf("truncated entry count at byte %d", r.Off)
		return 0
	}
	v, n := binary.Uvarint(r.B[r.Off : r.Off+5])
	if n != 5 {
		r.Err = fmt.Errorf("malformed entry count at byte %d", r.Off)
		return 0
	}
	r.Off += 5
	return v
}

// Count reads an element count and bounds it by the bytes left (each
// element takes at least one byte).
func (r *Reader) Count() int {
	v := r.Uvarint()
	if r.Err == nil && v > uint64(len(r.B)-r.Off) {
		r.Err = fmt.Errorf("count %d at byte %d exceeds the %d bytes left", v, r.Off, len(r.B)-r.Off)
	}
	if r.Err != nil {
		return 0
	}
	return int(v)
}

// Bytes reads a length-prefixed byte string. The result aliases B.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.Err != nil {
		return nil
	}
	if n > uint64(len(r.B)-r.Off) {
		r.Err = fmt.Errorf("length %d at byte %d runs past the end (%d bytes)", n, r.Off, len(r.B))
		return nil
	}
	out := r.B[r.Off : r.Off+int(n)]
	r.Off += int(n)
	return out
}

// Str reads a length-prefixed string (a copy). (Not String: a Reader is
// not a fmt.Stringer, printing one must not consume it.)
func (r *Reader) Str() string { return string(r.Bytes()) }

// PutPaddedUvarint writes v as a uvarint that always takes len(b) bytes
// (continuation bits on every byte but the last), so a count can be
// patched in after the entries are written. It panics when v needs more
// than the 7*len(b) bits those bytes hold (5 bytes: v < 2^35), as
// binary.PutUvarint does for a short buffer: the caller sized the field
// for its counts, so one that does not fit is a bug in the caller, not
// bad input, and writing its low bits would make a blob that reads back
// as another count. (streaming's state blob counts the graph's nodes,
// which cannot come near 2^35.)
func PutPaddedUvarint(b []byte, v uint64) {
	if bits := 7 * len(b); bits < 64 && v>>bits != 0 {
		panic(fmt.Sprintf("wire.PutPaddedUvarint: %d does not fit in %d bytes (at most %d)", v, len(b), uint64(1)<<bits-1))
	}
	for i := range b {
		c := byte(v & 0x7f)
		v >>= 7
		if i < len(b)-1 {
			c |= 0x80
		}
		b[i] = c
	}
}
