package kafka

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

func TestPieceRoundTrip(t *testing.T) {
	pw := pieceWriter{Limit: 64}
	want := map[string][]byte{}
	for i := range 40 {
		k := string(rune('a'+i%26)) + string(rune('0'+i/26))
		v := bytes.Repeat([]byte{byte(i)}, i%7)
		pw.Add(k, v)
		want[k] = v
	}
	pw.Close()
	require.Greater(t, len(pw.Pieces()), 1, "limit should split the entries into several pieces")
	got := map[string][]byte{}
	for _, p := range pw.Pieces() {
		require.NoError(t, decodePiece(p, func(k, v []byte) error {
			got[string(k)] = append([]byte{}, v...)
			return nil
		}))
	}
	require.Equal(t, len(want), len(got))
	for k, v := range want {
		require.True(t, bytes.Equal(v, got[k]), k)
	}
}

func TestPieceCorrupt(t *testing.T) {
	pw := pieceWriter{Limit: 1 << 20}
	pw.Add("k", []byte("blob"))
	pw.Close()
	p := pw.Pieces()[0]
	for _, bad := range [][]byte{nil, {2, 1}, p[:len(p)-1], append(append([]byte{}, p...), 0)} {
		err := decodePiece(bad, func(k, v []byte) error { return nil })
		require.ErrorIs(t, err, streaming.ErrCorrupt, "%x", bad)
	}
}

// FuzzDecodePiece: a checkpoint piece read back from a store never
// panics, corrupt bytes are refused with ErrCorrupt, and whatever decodes
// re-encodes to a piece that decodes to the same entries (varints may be
// overlong in the input, so bytes need not match).
func FuzzDecodePiece(f *testing.F) {
	pw := pieceWriter{Limit: 1 << 20}
	pw.Add("sensor-1", []byte{1, 2, 3})
	pw.Add("", nil)
	pw.Close()
	f.Add(pw.Pieces()[0])
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		type entry struct{ k, v string }
		read := func(p []byte) ([]entry, error) {
			var es []entry
			err := decodePiece(p, func(k, v []byte) error {
				es = append(es, entry{string(k), string(v)})
				return nil
			})
			return es, err
		}
		es, err := read(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error without ErrCorrupt: %v", err)
			}
			return
		}
		re := pieceWriter{Limit: 1 << 30}
		for _, e := range es {
			re.Add(e.k, []byte(e.v))
		}
		re.Close()
		if len(es) == 0 {
			return
		}
		again, err := read(re.Pieces()[0])
		if err != nil {
			t.Fatalf("re-encoded piece unreadable: %v", err)
		}
		require.Equal(t, es, again)
	})
}
