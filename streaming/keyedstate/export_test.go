package keyedstate

// PiecesOf encodes (key, state) entries, sorted by key, as checkpoint
// pieces of about limit bytes: for tests that build a checkpoint without
// running the records that made it.
func PiecesOf(limit int, keys, states [][]byte) ([][]byte, error) {
	w := pieceWriter{limit: limit}
	var out [][]byte
	for i := range keys {
		if err := w.add(keys[i], states[i], false); err != nil {
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
