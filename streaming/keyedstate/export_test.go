package keyedstate

import (
	"encoding/binary"
	"hash/crc32"
	"iter"

	"github.com/dgraph-io/badger/v4"
)

// PiecesOf encodes (key, state) entries, sorted by key, as checkpoint
// pieces of about limit bytes: for tests that build a checkpoint without
// running the records that made it.
func PiecesOf(limit int, keys, states [][]byte) ([][]byte, error) {
	w := pieceWriter{limit: limit}
	var out [][]byte
	for i := range keys {
		if err := w.add(keys[i], states[i], 0, false); err != nil {
			return nil, err
		}
		if w.full() {
			out = append(out, append([]byte(nil), w.finish()...))
		}
	}
	if last := w.finish(); last != nil {
		out = append(out, append([]byte(nil), last...))
	}
	return out, nil
}

// PiecesSeq yields the checkpoint pieces of n keys, key(i) for i in
// 0..n−1 (increasing in byte order), all with the same state, one piece
// of about limit bytes at a time: a large checkpoint without holding it.
func PiecesSeq(limit, n int, key func(i int) []byte, state []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		w := pieceWriter{limit: limit}
		for i := range n {
			if err := w.add(key(i), state, 0, false); err != nil {
				yield(nil, err)
				return
			}
			if w.full() && !yield(w.finish(), nil) {
				return
			}
		}
		if last := w.finish(); last != nil {
			yield(last, nil)
		}
	}
}

// PieceV1 is a piece of format version 1 (no last-seen times) holding
// one key's state, as checkpoints written before version 2 hold.
func PieceV1(key string, state []byte) []byte {
	b := []byte{1, entryState}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(state)))
	b = append(b, state...)
	b = binary.LittleEndian.AppendUint32(b, 1)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, pieceCRC))
}

// SetValueLogGC replaces Badger's value-log GC the flusher runs (for a GC
// that fails) until the test ends.
func SetValueLogGC(t interface{ Cleanup(func()) }, gc func(db *badger.DB, discardRatio float64) error) {
	old := runValueLogGC
	runValueLogGC = gc
	t.Cleanup(func() { runValueLogGC = old })
}
