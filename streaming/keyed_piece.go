package streaming

import (
	"encoding/binary"
	"fmt"

	"github.com/tflo-io/tflo/internal/wire"
)

// KeyedPieceVersion is the format of a keyed-state checkpoint piece, the
// unit a CheckpointSource over per-key Instances (a Kafka partition, an
// edge gateway) emits from Cut.Pieces:
//
//	version uvarint | count uvarint | count × (len key | key | len blob | blob)
//
// each blob an Instance.Save of its key. On restore a later piece's entry
// for a key wins. The Checkpointer's snapshot codec adds the checksum
// around each piece.
const KeyedPieceVersion = 1

// PieceWriter packs (key, blob) entries into keyed pieces of about Limit
// bytes. Use it from one goroutine.
type PieceWriter struct {
	// Limit is the size at which a piece is closed (at least one entry
	// per piece).
	Limit int

	pieces [][]byte
	cur    []byte // entries of the open piece
	count  int
}

// Add appends one entry; it closes the open piece once it reaches Limit.
func (w *PieceWriter) Add(key string, blob []byte) {
	w.cur = AppendPieceEntry(w.cur, key, blob)
	w.count++
	if len(w.cur) >= w.Limit {
		w.Close()
	}
}

// Close closes the open piece, if it holds entries.
func (w *PieceWriter) Close() {
	if w.count == 0 {
		return
	}
	w.pieces = append(w.pieces, NewKeyedPiece(w.count, w.cur))
	w.cur, w.count = w.cur[:0], 0
}

// Pieces returns the closed pieces.
func (w *PieceWriter) Pieces() [][]byte { return w.pieces }

// AppendPieceEntry appends one (key, blob) entry of a keyed piece.
func AppendPieceEntry(dst []byte, key string, blob []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(blob)))
	return append(dst, blob...)
}

// NewKeyedPiece returns a piece holding count entries already encoded by
// AppendPieceEntry in entries (copied).
func NewKeyedPiece(count int, entries []byte) []byte {
	p := binary.AppendUvarint(make([]byte, 0, len(entries)+12), KeyedPieceVersion)
	p = binary.AppendUvarint(p, uint64(count))
	return append(p, entries...)
}

// DecodeKeyedPiece calls fn for each entry of a keyed piece, in order;
// key and blob alias piece. Malformed bytes are refused with an error
// wrapping ErrCorrupt that says where.
func DecodeKeyedPiece(piece []byte, fn func(key, blob []byte) error) error {
	r := wire.Reader{B: piece}
	ver := r.Uvarint()
	if r.Err == nil && ver != KeyedPieceVersion {
		return fmt.Errorf("keyed piece: format version %d, this build reads %d: %w", ver, KeyedPieceVersion, ErrCorrupt)
	}
	count := r.Uvarint()
	if r.Err == nil && count > uint64(len(piece)) {
		return fmt.Errorf("keyed piece: claims %d entries in %d bytes: %w", count, len(piece), ErrCorrupt)
	}
	for i := uint64(0); i < count && r.Err == nil; i++ {
		key := r.Bytes()
		blob := r.Bytes()
		if r.Err != nil {
			break
		}
		if err := fn(key, blob); err != nil {
			return err
		}
	}
	if r.Err != nil {
		return fmt.Errorf("keyed piece: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(piece) {
		return fmt.Errorf("keyed piece: %d trailing bytes: %w", len(piece)-r.Off, ErrCorrupt)
	}
	return nil
}
