package kafka

import (
	"strconv"

	"github.com/tflo-io/tflo/streaming"
)

// A partition's checkpoint pieces use the keyed piece format of package
// streaming (streaming.KeyedPieceVersion): the keys changed since that
// store's previous saved cut, each blob an Instance.Save of its key.

// ShardName is the name of a partition's checkpointer: the prefix of its
// pieces and manifest in the StateStore and its CursorStore key,
// "kafka/<group>/<topic>/<partition>".
func ShardName(group string, p Partition) string {
	return "kafka/" + group + "/" + p.Topic + "/" + strconv.Itoa(int(p.Partition))
}

// pieceWriter packs entries into pieces of about limit bytes.
type pieceWriter = streaming.PieceWriter

// decodePiece calls fn for each entry of a piece; blobs alias piece.
func decodePiece(piece []byte, fn func(key, blob []byte) error) error {
	return streaming.DecodeKeyedPiece(piece, fn)
}
