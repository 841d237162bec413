package streaming_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestKeyedPiecesRoundTrip(t *testing.T) {
	w := streaming.PieceWriter{Limit: 64}
	want := map[string]string{}
	for i := range 50 {
		k, v := fmt.Sprintf("sensor-%02d", i), fmt.Sprintf("state-%d", i*i)
		want[k] = v
		w.Add(k, []byte(v))
	}
	w.Close()
	require.Greater(t, len(w.Pieces()), 1, "a 64-byte limit splits 50 entries into several pieces")
	got := map[string]string{}
	for _, p := range w.Pieces() {
		require.NoError(t, streaming.DecodeKeyedPiece(p, func(k, b []byte) error {
			got[string(k)] = string(b)
			return nil
		}))
	}
	assert.Equal(t, want, got)
}

func TestDecodeKeyedPieceRefusesCorruptBytes(t *testing.T) {
	w := streaming.PieceWriter{Limit: 1 << 20}
	w.Add("a", []byte("blob"))
	w.Add("b/c", nil)
	w.Close()
	p := w.Pieces()[0]
	for n := range len(p) {
		err := streaming.DecodeKeyedPiece(p[:n], func(k, b []byte) error { return nil })
		require.ErrorIs(t, err, streaming.ErrCorrupt, "prefix of %d bytes", n)
	}
	bad := append([]byte{9}, p[1:]...)
	assert.ErrorContains(t, streaming.DecodeKeyedPiece(bad, func(k, b []byte) error { return nil }), "format version 9")
	assert.ErrorIs(t, streaming.DecodeKeyedPiece(append(p, 0), func(k, b []byte) error { return nil }), streaming.ErrCorrupt)
}

func FuzzDecodeKeyedPiece(f *testing.F) {
	w := streaming.PieceWriter{Limit: 1 << 20}
	w.Add("k", []byte{1, 2, 3})
	w.Close()
	f.Add(w.Pieces()[0])
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var keys []string
		var blobs [][]byte
		if streaming.DecodeKeyedPiece(data, func(k, b []byte) error {
			keys = append(keys, string(k))
			blobs = append(blobs, b)
			return nil
		}) != nil {
			return
		}
		// What decodes re-encodes to a piece that decodes to the same
		// entries (bytes may differ: varints need not be minimal).
		re := streaming.PieceWriter{Limit: 1 << 30}
		for i := range keys {
			re.Add(keys[i], blobs[i])
		}
		re.Close()
		if len(keys) == 0 {
			return
		}
		i := 0
		if err := streaming.DecodeKeyedPiece(re.Pieces()[0], func(k, b []byte) error {
			if string(k) != keys[i] || string(b) != string(blobs[i]) {
				t.Fatalf("entry %d: re-decoded (%q, %x), want (%q, %x)", i, k, b, keys[i], blobs[i])
			}
			i++
			return nil
		}); err != nil {
			t.Fatalf("re-encoded piece does not decode: %v", err)
		}
	})
}
