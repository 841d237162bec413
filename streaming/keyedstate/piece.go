package keyedstate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/tflo-io/tflo/streaming"
)

// pieceVersion is the format version of a checkpoint piece.
//
// Format:
//
//	version (1 byte) | entries... | count (uint32 LE) | crc32c (uint32 LE)
//	entry = kind (1 byte: 0 state, 1 tombstone) | uvarint len(key) key | [state only] uvarint seen | uvarint len(state) state
//
// seen is when the key was last seen (unix seconds; 0: unknown or keys do
// not expire), so a restore keeps idle keys' age (WithKeyTTL). Version 1,
// still read, has no seen. Entries are sorted by key bytes, strictly
// increasing; the checksum (Castagnoli) covers every byte before it.
const pieceVersion = 2

const (
	entryState     = 0
	entryTombstone = 1
)

var pieceCRC = crc32.MakeTable(crc32.Castagnoli)

// pieceWriter builds pieces of about limit bytes.
type pieceWriter struct {
	buf   []byte
	count uint32
	limit int
	last  []byte
}

func (w *pieceWriter) reset() {
	w.buf = append(w.buf[:0], pieceVersion)
	w.count = 0
	w.last = w.last[:0]
}

// add appends an entry: key's state, last seen at seen (unix seconds, 0:
// unknown), or its tombstone.
func (w *pieceWriter) add(key []byte, state []byte, seen int64, tombstone bool) error {
	if len(w.buf) == 0 {
		w.reset()
	}
	if w.count > 0 && bytes.Compare(key, w.last) <= 0 {
		return fmt.Errorf("keyedstate: piece entry %q is not after %q", key, w.last)
	}
	if tombstone {
		w.buf = append(w.buf, entryTombstone)
		w.buf = binary.AppendUvarint(w.buf, uint64(len(key)))
		w.buf = append(w.buf, key...)
	} else {
		w.buf = append(w.buf, entryState)
		w.buf = binary.AppendUvarint(w.buf, uint64(len(key)))
		w.buf = append(w.buf, key...)
		w.buf = binary.AppendUvarint(w.buf, uint64(max(seen, 0)))
		w.buf = binary.AppendUvarint(w.buf, uint64(len(state)))
		w.buf = append(w.buf, state...)
	}
	w.last = append(w.last[:0], key...)
	w.count++
	return nil
}

func (w *pieceWriter) full() bool { return len(w.buf) >= w.limit }

// finish returns the piece (valid until the next add) or nil when empty.
func (w *pieceWriter) finish() []byte {
	if w.count == 0 {
		return nil
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, w.count)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, crc32.Checksum(w.buf, pieceCRC))
	out := w.buf
	w.buf = w.buf[:0]
	w.count = 0
	return out
}

// pieceEntry is one decoded entry; Key and State alias the piece bytes.
type pieceEntry struct {
	Key       []byte
	State     []byte
	Seen      int64 // unix seconds the key was last seen (0: unknown)
	Tombstone bool
}

// decodePiece checks a piece and returns its entries in order.
func decodePiece(b []byte) ([]pieceEntry, error) {
	if len(b) < 9 {
		return nil, fmt.Errorf("keyedstate piece: %d bytes is too short: %w", len(b), streaming.ErrCorrupt)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, pieceCRC), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("keyedstate piece: checksum %08x does not match stored %08x: %w", got, want, streaming.ErrCorrupt)
	}
	version := body[0]
	if version != 1 && version != pieceVersion {
		return nil, fmt.Errorf("keyedstate piece: format version %d, this build reads 1 to %d: %w", version, pieceVersion, streaming.ErrCorrupt)
	}
	count := binary.LittleEndian.Uint32(body[len(body)-4:])
	data := body[1 : len(body)-4]
	if uint64(count) > uint64(len(data)) {
		return nil, fmt.Errorf("keyedstate piece: %d entries cannot fit %d bytes: %w", count, len(data), streaming.ErrCorrupt)
	}
	out := make([]pieceEntry, 0, count)
	off := 0
	field := func() ([]byte, error) {
		n, w := binary.Uvarint(data[off:])
		if w <= 0 || n > uint64(len(data)-off-w) {
			return nil, fmt.Errorf("keyedstate piece: bad length at byte %d: %w", off+1, streaming.ErrCorrupt)
		}
		v := data[off+w : off+w+int(n)]
		off += w + int(n)
		return v, nil
	}
	for off < len(data) {
		kind := data[off]
		off++
		if kind != entryState && kind != entryTombstone {
			return nil, fmt.Errorf("keyedstate piece: entry kind %d at byte %d: %w", kind, off, streaming.ErrCorrupt)
		}
		key, err := field()
		if err != nil {
			return nil, err
		}
		e := pieceEntry{Key: key, Tombstone: kind == entryTombstone}
		if !e.Tombstone {
			if version >= 2 {
				seen, w := binary.Uvarint(data[off:])
				if w <= 0 || seen > math.MaxInt64 {
					return nil, fmt.Errorf("keyedstate piece: bad last-seen time at byte %d: %w", off+1, streaming.ErrCorrupt)
				}
				e.Seen, off = int64(seen), off+w
			}
			if e.State, err = field(); err != nil {
				return nil, err
			}
		}
		if n := len(out); n > 0 && bytes.Compare(out[n-1].Key, key) >= 0 {
			return nil, fmt.Errorf("keyedstate piece: key %q is not after %q: %w", key, out[n-1].Key, streaming.ErrCorrupt)
		}
		out = append(out, e)
	}
	if uint32(len(out)) != count {
		return nil, fmt.Errorf("keyedstate piece: %d entries, trailer says %d: %w", len(out), count, streaming.ErrCorrupt)
	}
	return out, nil
}
