package kafka

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/tflo-io/tflo/streaming"
)

// pieceVersion is the format of one checkpoint piece of a partition:
//
//	version uvarint | count uvarint | count × (len key | key | len blob | blob)
//
// each blob an Instance.Save of its key. A checkpoint's pieces hold the
// keys changed since that store's previous saved cut; on restore a later
// piece's entry for a key wins. The Checkpointer's snapshot codec adds the
// checksum around each piece.
const pieceVersion = 1

// ShardName is the name of a partition's checkpointer: the prefix of its
// pieces and manifest in the StateStore and its CursorStore key,
// "kafka/<group>/<topic>/<partition>".
func ShardName(group string, p Partition) string {
	return "kafka/" + group + "/" + p.Topic + "/" + strconv.Itoa(int(p.Partition))
}

// pieceWriter packs entries into pieces of about limit bytes.
type pieceWriter struct {
	limit  int
	pieces [][]byte
	cur    []byte // entries of the open piece
	count  int
}

func (w *pieceWriter) add(key string, blob []byte) {
	w.cur = binary.AppendUvarint(w.cur, uint64(len(key)))
	w.cur = append(w.cur, key...)
	w.cur = binary.AppendUvarint(w.cur, uint64(len(blob)))
	w.cur = append(w.cur, blob...)
	w.count++
	if len(w.cur) >= w.limit {
		w.close()
	}
}

func (w *pieceWriter) close() {
	if w.count == 0 {
		return
	}
	p := binary.AppendUvarint(make([]byte, 0, len(w.cur)+12), pieceVersion)
	p = binary.AppendUvarint(p, uint64(w.count))
	w.pieces = append(w.pieces, append(p, w.cur...))
	w.cur, w.count = w.cur[:0], 0
}

// decodePiece calls fn for each entry of a piece; blobs alias piece.
func decodePiece(piece []byte, fn func(key, blob []byte) error) error {
	off := 0
	next := func() (uint64, error) {
		v, n := binary.Uvarint(piece[off:])
		if n <= 0 {
			return 0, fmt.Errorf("partition piece: truncated varint at byte %d: %w", off, streaming.ErrCorrupt)
		}
		off += n
		return v, nil
	}
	chunk := func() ([]byte, error) {
		n, err := next()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(piece)-off) {
			return nil, fmt.Errorf("partition piece: length %d at byte %d runs past the end (%d bytes): %w", n, off, len(piece), streaming.ErrCorrupt)
		}
		b := piece[off : off+int(n)]
		off += int(n)
		return b, nil
	}
	ver, err := next()
	if err != nil {
		return err
	}
	if ver != pieceVersion {
		return fmt.Errorf("partition piece: format version %d, this build reads %d: %w", ver, pieceVersion, streaming.ErrCorrupt)
	}
	count, err := next()
	if err != nil {
		return err
	}
	for i := uint64(0); i < count; i++ {
		key, err := chunk()
		if err != nil {
			return err
		}
		blob, err := chunk()
		if err != nil {
			return err
		}
		if err := fn(key, blob); err != nil {
			return err
		}
	}
	if off != len(piece) {
		return fmt.Errorf("partition piece: %d trailing bytes: %w", len(piece)-off, streaming.ErrCorrupt)
	}
	return nil
}
