package keyedstate

import (
	"encoding/binary"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

// KeyCodec turns a key into bytes and back. AppendKey must be injective
// (two keys never share bytes); pieces are sorted by these bytes.
type KeyCodec[K comparable] interface {
	AppendKey(dst []byte, k K) []byte
	DecodeKey(b []byte) (K, error)
}

// StringKeys is the KeyCodec of string keys: the bytes of the string.
type StringKeys struct{}

var _ KeyCodec[string] = StringKeys{}

// AppendKey appends k.
func (StringKeys) AppendKey(dst []byte, k string) []byte { return append(dst, k...) }

// DecodeKey returns b as a string.
func (StringKeys) DecodeKey(b []byte) (string, error) { return string(b), nil }

// Uint64Keys is the KeyCodec of uint64 keys: 8 bytes big-endian, so byte
// order is numeric order.
type Uint64Keys struct{}

var _ KeyCodec[uint64] = Uint64Keys{}

// AppendKey appends k big-endian.
func (Uint64Keys) AppendKey(dst []byte, k uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, k)
}

// DecodeKey reads 8 big-endian bytes.
func (Uint64Keys) DecodeKey(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("uint64 key: %d bytes, want 8: %w", len(b), streaming.ErrCorrupt)
	}
	return binary.BigEndian.Uint64(b), nil
}
