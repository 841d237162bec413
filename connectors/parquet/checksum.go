package parquet

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"

	"github.com/tflo-io/tflo/streaming"
)

// ChecksumKey is the key of the file key-value metadata entry holding the
// whole-file checksum: "crc32c:" and 8 hex digits, the CRC-32C of every
// byte of the file with those 8 digits read as "????????".
//
// Parquet's own page CRCs cover page data only; page headers and the
// footer are trusted by decoders, and a corrupt one makes parquet-go
// decode garbage or panic. The reader verifies this checksum before it
// decodes anything of a file, so a corrupt archive file is refused with an
// error wrapping streaming.ErrCorrupt.
const ChecksumKey = "tflo.checksum"

const (
	checksumPrefix      = "crc32c:"
	checksumPlaceholder = "????????"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// verifyChunk is the read size of the checksum pass: large enough that an
// object store serves a file in few requests, small enough to bound memory.
const verifyChunk = 1 << 20

// sealChecksum replaces the placeholder in the footer of an encoded file
// with the file's checksum.
func sealChecksum(data []byte) error {
	i := bytes.LastIndex(data, []byte(checksumPrefix+checksumPlaceholder))
	if i < 0 {
		return fmt.Errorf("checksum placeholder missing from the encoded file")
	}
	at := i + len(checksumPrefix)
	sum := crc32.Checksum(data, castagnoli)
	hex.Encode(data[at:at+8], binary.BigEndian.AppendUint32(nil, sum))
	return nil
}

// verifyChecksum checks obj's whole-file checksum, streaming it in chunks
// (memory stays bounded whatever the file size). Errors wrap
// streaming.ErrCorrupt.
func verifyChecksum(obj Object) error {
	size := obj.Size()
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), streaming.ErrCorrupt)
	}
	if size < 12 {
		return corrupt("%d bytes is too short for a Parquet file", size)
	}
	var tail [8]byte
	if _, err := obj.ReadAt(tail[:], size-8); err != nil {
		return fmt.Errorf("read footer length: %w", err)
	}
	if string(tail[4:]) != "PAR1" {
		return corrupt("no Parquet magic at the end of the file")
	}
	footerLen := int64(binary.LittleEndian.Uint32(tail[:4]))
	if footerLen > size-12 {
		return corrupt("footer of %d bytes in a %d-byte file", footerLen, size)
	}
	footerAt := size - 8 - footerLen
	footer := make([]byte, footerLen)
	if _, err := obj.ReadAt(footer, footerAt); err != nil {
		return fmt.Errorf("read footer: %w", err)
	}
	i := bytes.LastIndex(footer, []byte(checksumPrefix))
	if i < 0 || i+len(checksumPrefix)+8 > len(footer) {
		return corrupt("no %s in the footer", ChecksumKey)
	}
	var want [4]byte
	if _, err := hex.Decode(want[:], footer[i+len(checksumPrefix):i+len(checksumPrefix)+8]); err != nil {
		return corrupt("%s is not hex", ChecksumKey)
	}
	patchAt := footerAt + int64(i+len(checksumPrefix))
	var sum uint32
	buf := make([]byte, verifyChunk)
	for off := int64(0); off < size; {
		n := int(min(int64(len(buf)), size-off))
		if _, err := obj.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		chunk := buf[:n]
		// Read the checksum digits as the placeholder they were when hashed.
		for p := max(patchAt, off); p < min(patchAt+8, off+int64(n)); p++ {
			chunk[p-off] = '?'
		}
		sum = crc32.Update(sum, castagnoli, chunk)
		off += int64(n)
	}
	if got := binary.BigEndian.Uint32(want[:]); got != sum {
		return corrupt("checksum crc32c:%08x, file content hashes to %08x", got, sum)
	}
	return nil
}
