package keyedstate

import (
	"context"
	"fmt"
	"iter"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

type kv struct {
	k, v string
	tomb bool
}

func buildPieces(t testing.TB, limit int, entries []kv) [][]byte {
	t.Helper()
	w := pieceWriter{limit: limit}
	var out [][]byte
	for _, e := range entries {
		require.NoError(t, w.add([]byte(e.k), []byte(e.v), 0, e.tomb))
		if w.full() {
			out = append(out, append([]byte(nil), w.finish()...))
		}
	}
	if last := w.finish(); last != nil {
		out = append(out, append([]byte(nil), last...))
	}
	return out
}

func decodeAll(t testing.TB, pieces [][]byte) []kv {
	t.Helper()
	var out []kv
	for _, p := range pieces {
		es, err := decodePiece(p)
		require.NoError(t, err)
		for _, e := range es {
			out = append(out, kv{string(e.Key), string(e.State), e.Tombstone})
		}
	}
	return out
}

func TestPieceRoundTrip(t *testing.T) {
	entries := []kv{{"", "empty key", false}, {"a", "", false}, {"a/b", "x", false}, {"b", "", true}, {"\xff", "bin\x00", false}}
	for _, limit := range []int{1, 10, 1 << 20} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			pieces := buildPieces(t, limit, entries)
			require.Equal(t, entries, decodeAll(t, pieces))
		})
	}
}

// Regression: a piece emitted because it was full left its entry count
// behind, and the final finish produced an empty 8-byte piece that every
// reader refused.
func TestPieceFinishAfterFullEmitsNothing(t *testing.T) {
	w := pieceWriter{limit: 1}
	require.NoError(t, w.add([]byte("k"), []byte("v"), 0, false))
	require.True(t, w.full())
	require.NotNil(t, w.finish())
	require.Nil(t, w.finish())
}

func TestPieceRefusesUnsortedAndCorrupt(t *testing.T) {
	w := pieceWriter{limit: 1 << 20}
	require.NoError(t, w.add([]byte("b"), nil, 0, false))
	require.ErrorContains(t, w.add([]byte("a"), nil, 0, false), `"a" is not after "b"`)

	good := buildPieces(t, 1<<20, []kv{{"a", "1", false}, {"b", "2", false}})[0]
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:5], "too short"},
		{"truncated", good[:len(good)-1], "checksum"},
		{"flipped", func() []byte { b := append([]byte(nil), good...); b[3] ^= 1; return b }(), "checksum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodePiece(tc.b)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func FuzzDecodePiece(f *testing.F) {
	f.Add(buildPieces(f, 1<<20, []kv{{"a", "1", false}, {"b", "", true}})[0])
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	w := pieceWriter{limit: 1 << 20}
	require.NoError(f, w.add([]byte("k"), []byte("state"), 1_700_000_000, false))
	f.Add(append([]byte(nil), w.finish()...))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := decodePiece(b)
		if err != nil {
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			return
		}
		var in []kv
		for _, e := range es {
			in = append(in, kv{string(e.Key), string(e.State), e.Tombstone})
		}
		if len(in) == 0 {
			return
		}
		require.Equal(t, in, decodeAll(t, buildPieces(t, 1<<30, in)))
	})
}

func seqOfPieces(pieces [][]byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for _, p := range pieces {
			if !yield(p, nil) {
				return
			}
		}
	}
}

func TestMergeRuns(t *testing.T) {
	r := &Runtime[string]{cfg: config{pieceBytes: 16}}
	runs := [][]kv{
		{{"a", "1", false}, {"b", "1", false}, {"c", "1", false}, {"e", "1", false}},
		{{"b", "2", false}, {"c", "", true}, {"d", "2", false}},
		{{"a", "3", false}, {"d", "", true}, {"f", "3", false}},
	}
	var seqs []iter.Seq2[[]byte, error]
	for _, run := range runs {
		seqs = append(seqs, seqOfPieces(buildPieces(t, 12, run)))
	}
	var out [][]byte
	require.NoError(t, r.MergeRuns(context.Background(), seqs, func(p []byte) error {
		out = append(out, append([]byte(nil), p...))
		return nil
	}))
	require.Greater(t, len(out), 1)
	require.Equal(t, []kv{{"a", "3", false}, {"b", "2", false}, {"e", "1", false}, {"f", "3", false}}, decodeAll(t, out))
}

// TestMergeRunsKeepsLastSeen: merging runs keeps each entry's last-seen
// time (piece format 2), so a key's TTL age survives a merge.
func TestMergeRunsKeepsLastSeen(t *testing.T) {
	r := &Runtime[string]{cfg: config{pieceBytes: 1 << 20}}
	run := func(key string, seen int64) iter.Seq2[[]byte, error] {
		w := pieceWriter{limit: 1 << 20}
		require.NoError(t, w.add([]byte(key), []byte("s"), seen, false))
		return seqOfPieces([][]byte{append([]byte(nil), w.finish()...)})
	}
	var out [][]byte
	require.NoError(t, r.MergeRuns(context.Background(), []iter.Seq2[[]byte, error]{run("a", 100), run("b", 200), run("a", 300)},
		func(p []byte) error { out = append(out, append([]byte(nil), p...)); return nil }))
	require.Len(t, out, 1)
	es, err := decodePiece(out[0])
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, int64(300), es[0].Seen, "the newest run's entry wins, with its time")
	require.Equal(t, int64(200), es[1].Seen)
}
