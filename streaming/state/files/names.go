package files

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/tflo-io/tflo/streaming"
)

// nameEncoding is lower-case base32hex without padding: file-name safe,
// case-insensitive-safe, order-preserving and reversible.
var nameEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// maxPlainName is the longest encoded name; longer keys are hashed.
const maxPlainName = 200

type kind byte

const (
	kindSnapshot kind = 's'
	kindCursor   kind = 'c'
)

func (k kind) String() string {
	if k == kindCursor {
		return "cursor"
	}
	return "snapshot"
}

// fileName returns the file name for key of kind k.
func fileName(k kind, key []byte) string {
	if nameEncoding.EncodedLen(len(key))+2 <= maxPlainName {
		return string(k) + "-" + nameEncoding.EncodeToString(key)
	}
	sum := sha256.Sum256(key)
	return string(k) + "h-" + hex.EncodeToString(sum[:])
}

// parseName reports the kind of a store file name, whether its key is
// hashed, and the key itself when it is not.
func parseName(name string) (k kind, key []byte, hashed, ok bool, err error) {
	switch {
	case strings.HasPrefix(name, "s-"), strings.HasPrefix(name, "c-"):
		key, err := nameEncoding.DecodeString(name[2:])
		if err != nil {
			return 0, nil, false, true, fmt.Errorf("file %q: name does not decode to a key: %v: %w", name, err, streaming.ErrCorrupt)
		}
		return kind(name[0]), key, false, true, nil
	case strings.HasPrefix(name, "sh-"), strings.HasPrefix(name, "ch-"):
		return kind(name[0]), nil, true, true, nil
	}
	return 0, nil, false, false, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendKeyHeader appends the key header every file starts with:
// uvarint len(key) | key | 4-byte little-endian CRC32C of key.
func appendKeyHeader(dst, key []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(key, castagnoli))
}

// splitKeyHeader returns the key a file records and the rest of its bytes.
func splitKeyHeader(b []byte) (key, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) || uint64(len(b)-w)-n < 4 {
		return nil, nil, fmt.Errorf("key header truncated or malformed: %w", streaming.ErrCorrupt)
	}
	key = b[w : w+int(n)]
	sum := binary.LittleEndian.Uint32(b[w+int(n):])
	if got := crc32.Checksum(key, castagnoli); got != sum {
		return nil, nil, fmt.Errorf("key header checksum mismatch: stored crc32c %08x, computed %08x: %w", sum, got, streaming.ErrCorrupt)
	}
	return key, b[w+int(n)+4:], nil
}
