package streaming_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

func sampleManifest() streaming.Manifest {
	return streaming.Manifest{ID: 42, Epoch: 7, Runs: []streaming.ManifestRun{
		{ID: 40, Pieces: []streaming.ManifestPiece{{Key: "s/piece/7/40/0", Size: 1 << 20}, {Key: "s/piece/7/40/1", Size: 3}}},
		{ID: 42, Pieces: []streaming.ManifestPiece{{Key: "s/piece/7/42/0", Size: 99}}},
	}}
}

func TestManifestRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		m    streaming.Manifest
	}{
		{"empty", streaming.Manifest{}},
		{"runs", sampleManifest()},
		{"binary keys", streaming.Manifest{ID: 1, Runs: []streaming.ManifestRun{{ID: 1, Pieces: []streaming.ManifestPiece{{Key: "\x00/\xff.", Size: 0}}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := streaming.UnmarshalManifest(streaming.MarshalManifest(tc.m))
			require.NoError(t, err)
			require.Equal(t, tc.m, got)
		})
	}
	require.Equal(t, int64(1<<20+3+99), sampleManifest().Bytes())
}

func TestManifestCorruption(t *testing.T) {
	good := streaming.MarshalManifest(sampleManifest())
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated", good[:len(good)-7], "checksum"},
		{"too short", good[:3], "too short"},
		{"bit flip", func() []byte { b := append([]byte(nil), good...); b[5] ^= 0x10; return b }(), "checksum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := streaming.UnmarshalManifest(tc.b)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func FuzzUnmarshalManifest(f *testing.F) {
	f.Add(streaming.MarshalManifest(sampleManifest()))
	f.Add(streaming.MarshalManifest(streaming.Manifest{}))
	f.Add([]byte{1, 2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := streaming.UnmarshalManifest(b)
		if err != nil {
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			return
		}
		again, err := streaming.UnmarshalManifest(streaming.MarshalManifest(m))
		require.NoError(t, err)
		require.Equal(t, m, again)
	})
}
