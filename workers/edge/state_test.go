package edge

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestPieceRoundTripAndCorruption(t *testing.T) {
	c := &edgeCut{p: &Pipeline{sink: nopSink{}}, entries: []entry{{"a", []byte{1, 2}}, {"b/ä", nil}, {"c", make([]byte, 300)}}}
	var pieces [][]byte
	require.NoError(t, c.Pieces(context.Background(), func(p []byte) error { pieces = append(pieces, append([]byte(nil), p...)); return nil }))
	require.Len(t, pieces, 1)
	var got []entry
	require.NoError(t, decodePiece(pieces[0], func(k string, b []byte) error {
		got = append(got, entry{k, append([]byte{}, b...)})
		return nil
	}))
	require.Equal(t, []string{"a", "b/ä", "c"}, []string{got[0].key, got[1].key, got[2].key})
	require.Equal(t, []byte{1, 2}, got[0].blob)

	cases := map[string][]byte{
		"empty":          {},
		"bad version":    {9, 0},
		"truncated":      pieces[0][:len(pieces[0])-1],
		"trailing bytes": append(append([]byte{}, pieces[0]...), 0),
		"huge count":     {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			err := decodePiece(b, func(string, []byte) error { return nil })
			require.ErrorIs(t, err, streaming.ErrCorrupt)
		})
	}
}

type nopSink struct{}

func (nopSink) Publish(context.Context, Signal) error { return nil }
func (nopSink) Flush(context.Context) error           { return nil }

func FuzzDecodePiece(f *testing.F) {
	f.Add([]byte{1, 1, 1, 'a', 2, 1, 2})
	f.Add([]byte{1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := decodePiece(b, func(string, []byte) error { n++; return nil })
		if err != nil && !errors.Is(err, streaming.ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
		if n > len(b) {
			t.Fatalf("%d entries from %d bytes", n, len(b))
		}
	})
}

func TestNewValidates(t *testing.T) {
	_, err := New(nil, nopSink{}, nil, nil, WithThresholds(25, 20))
	require.ErrorContains(t, err, "low 25, high 20")
	_, err = New(nil, nopSink{}, nil, nil)
	require.ErrorContains(t, err, "WithThresholds")
	_, err = New(nil, nopSink{}, nil, nil, WithThresholds(20, 25))
	require.ErrorContains(t, err, "required")
}
