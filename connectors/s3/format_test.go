package s3

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

const (
	seg0 = "seg/00000000000000000006-0badf00d.seg"
	seg1 = "seg/00000000000000000007-1a2b3c4d.seg"
)

func sampleManifest() *manifest {
	m := &manifest{gen: 7, epoch: 3, segs: map[string]*segment{}, index: map[string]loc{}}
	var b segmentBuilder
	for _, k := range []string{"a", "", "x/y", "\x00\xff"} {
		e := b.add([]byte(k), streaming.Snapshot{Data: []byte("data of " + k)})
		m.index[k] = loc{seg: seg1, off: e.off, n: e.n}
	}
	body, data := b.finish()
	m.segs[seg1] = &segment{name: seg1, size: uint64(len(body)), data: data, live: data}
	m.segs[seg0] = &segment{name: seg0, size: 108, data: 80}
	return m
}

func TestManifestRoundTrip(t *testing.T) {
	m := sampleManifest()
	enc := encodeManifest(m)
	got, err := decodeManifest(enc)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

func TestCompressedManifest(t *testing.T) {
	m := sampleManifest()
	z := compressManifest(encodeManifest(m))
	got, err := parseManifest(z)
	require.NoError(t, err)
	require.Equal(t, m, got)
	got, err = parseManifest(encodeManifest(m))
	require.NoError(t, err, "the uncompressed form is read too")
	require.Equal(t, m, got)

	bad := bytes.Clone(z)
	bad[len(bad)-2] ^= 0x10
	_, err = parseManifest(bad)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	_, err = parseManifest(append([]byte(manifestZMagic), "not zstd"...))
	require.ErrorIs(t, err, streaming.ErrCorrupt)
}

func TestManifestRefusesDamage(t *testing.T) {
	enc := encodeManifest(sampleManifest())
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"truncated", enc[:len(enc)-3], "checksum"},
		{"flipped bit", func() []byte { b := bytes.Clone(enc); b[20] ^= 4; return b }(), "checksum"},
		{"magic", append([]byte("XXXXXXXX"), enc[8:]...), "magic"},
		{"segment name outside seg/", encodeManifest(&manifest{segs: map[string]*segment{"cursor/k-00": {name: "cursor/k-00", size: 28}}, index: map[string]loc{}}), "segment name"},
		{"segment name with dots", encodeManifest(&manifest{segs: map[string]*segment{"seg/../manifest": {name: "seg/../manifest", size: 28}}, index: map[string]loc{}}), "segment name"},
		{"segment over 5 GiB", encodeManifest(&manifest{segs: map[string]*segment{seg0: {name: seg0, size: 6 << 30, data: 6<<30 - 28}}, index: map[string]loc{}}), "do not make a segment"},
		{"size and record bytes disagree", encodeManifest(&manifest{segs: map[string]*segment{seg0: {name: seg0, size: 100, data: 10}}, index: map[string]loc{}}), "do not make a segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeManifest(tc.b)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSegmentRoundTrip(t *testing.T) {
	var b segmentBuilder
	snaps := map[string]streaming.Snapshot{
		"k1": {Meta: streaming.SnapshotMeta{FormatVersion: streaming.SnapshotFormatVersion, Epoch: 2}, Data: []byte("one")},
		"k2": {Meta: streaming.SnapshotMeta{FormatVersion: streaming.SnapshotFormatVersion, CursorType: "kafka", Cursor: []byte{1, 2}}},
	}
	b.add([]byte("k1"), snaps["k1"])
	b.add([]byte("k2"), snaps["k2"])
	body, data := b.finish()
	entries, gotData, err := decodeSegment(body)
	require.NoError(t, err)
	require.Equal(t, data, gotData)
	require.Len(t, entries, 2)
	for _, e := range entries {
		got, err := decodeLoaded("s3://b/seg", e.key, body[e.off:e.off+e.n])
		require.NoError(t, err)
		require.Equal(t, snaps[string(e.key)], got)
	}
	// A record read for the wrong key is refused, naming both.
	e := entries[0]
	_, err = decodeLoaded("s3://b/seg", []byte("k2"), body[e.off:e.off+e.n])
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.ErrorContains(t, err, `record holds key "k1"`)

	bad := bytes.Clone(body)
	bad[len(bad)-trailerLen-1] ^= 1 // inside the last record
	_, _, err = decodeSegment(bad)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
}

// The decoders read bytes from the bucket, which anyone with write access
// can change: they must refuse garbage with ErrCorrupt, never panic or
// allocate without bound.
func FuzzDecodeManifest(f *testing.F) {
	f.Add(encodeManifest(sampleManifest()))
	f.Add(encodeManifest(&manifest{segs: map[string]*segment{}, index: map[string]loc{}}))
	f.Add([]byte(manifestMagic))
	f.Add(compressManifest(encodeManifest(sampleManifest())))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseManifest(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes is safe to act on: segment names of the
		// segment form (they reach GET and DeleteObjects), sizes a PUT can
		// have written, records inside their segment.
		for name, sg := range m.segs {
			if !validSegmentName(name) || sg.size > maxPutBytes || sg.data+uint64(trailerLen) != sg.size {
				t.Fatalf("accepted segment %q of %d bytes (%d record bytes)", name, sg.size, sg.data)
			}
		}
		for k, l := range m.index {
			if sg := m.segs[l.seg]; sg == nil || l.n == 0 || l.off+l.n > sg.data {
				t.Fatalf("accepted key %q at %+v", k, l)
			}
		}
		again, err := decodeManifest(encodeManifest(m))
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		if len(again.index) != len(m.index) || len(again.segs) != len(m.segs) {
			t.Fatalf("round trip changed the manifest")
		}
	})
}

func FuzzDecodeSegment(f *testing.F) {
	var b segmentBuilder
	b.add([]byte("k"), streaming.Snapshot{Data: []byte("v")})
	body, _ := b.finish()
	f.Add(body)
	f.Add(appendRecord(nil, []byte("k"), streaming.MarshalSnapshot(streaming.Snapshot{})))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, data, err := decodeSegment(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
		}
		for _, e := range entries {
			if e.off+e.n > data {
				t.Fatalf("entry %+v runs past %d record bytes", e, data)
			}
			_, _ = decodeLoaded("s3://b/s", e.key, b[e.off:e.off+e.n])
		}
		if _, _, err := decodeRecord(b); err != nil && !errors.Is(err, streaming.ErrCorrupt) {
			t.Fatalf("record error does not wrap ErrCorrupt: %v", err)
		}
	})
}
