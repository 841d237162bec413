package streaming_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func snapshotCases() map[string]streaming.Snapshot {
	return map[string]streaming.Snapshot{
		"zero":      {},
		"data only": {Data: []byte("state")},
		"full meta": {
			Meta: streaming.SnapshotMeta{
				CursorType: "kafka",
				Cursor:     []byte{0, 1, 2, 0xff},
				Epoch:      42,
				Operators: []streaming.OperatorInfo{
					{Node: "sma", Operator: "sma", TypeVersion: 3},
					{Node: "cross/up", Operator: "threshold", TypeVersion: math.MaxUint32},
				},
				SchemaFingerprint: "9f1c0a",
				CreatedUnixNano:   1_700_000_000_123_456_789,
			},
			Data: bytes.Repeat([]byte{0xab}, 1000),
		},
		"negative time and max epoch": {
			Meta: streaming.SnapshotMeta{Epoch: math.MaxUint64, CreatedUnixNano: math.MinInt64},
			Data: []byte{0},
		},
		"large data": {Data: bytes.Repeat([]byte("0123456789"), 300_000)},
		"dropped nodes": {
			Meta: streaming.SnapshotMeta{
				CursorType:        "kafka",
				Cursor:            []byte{7},
				Epoch:             3,
				Operators:         []streaming.OperatorInfo{{Node: "sma", Operator: "sma", TypeVersion: 1}},
				DroppedNodes:      []string{"alarm", "cross/up"},
				SchemaFingerprint: "9f1c0a",
				CreatedUnixNano:   1_700_000_000_123_456_789,
			},
			Data: []byte("state"),
		},
	}
}

func TestSnapshotCodecRoundTrip(t *testing.T) {
	for name, s := range snapshotCases() {
		t.Run(name, func(t *testing.T) {
			b := streaming.MarshalSnapshot(s)
			require.Len(t, b, streaming.SnapshotEncodedLen(s))
			got, err := streaming.UnmarshalSnapshot(b)
			require.NoError(t, err)
			want := s
			want.Meta.FormatVersion = streaming.SnapshotFormatVersion
			if len(s.Meta.DroppedNodes) > 0 {
				want.Meta.FormatVersion = streaming.SnapshotFormatVersionDropped
			}
			require.Equal(t, want, got)

			// The result must not alias the input.
			if len(got.Data) > 0 {
				for i := range b {
					b[i] = 0
				}
				require.Equal(t, s.Data, got.Data)
			}
		})
	}
}

func TestSnapshotCodecAppendKeepsPrefix(t *testing.T) {
	s := snapshotCases()["full meta"]
	prefix := []byte("prefix")
	b := streaming.AppendSnapshot(append([]byte(nil), prefix...), s)
	require.Equal(t, prefix, b[:len(prefix)])
	got, err := streaming.UnmarshalSnapshot(b[len(prefix):])
	require.NoError(t, err)
	require.Equal(t, s.Data, got.Data)
}

// Every single-bit flip and every truncation of a valid encoding must be
// refused as corrupt, never decoded into a different snapshot.
func TestSnapshotCodecRefusesCorruption(t *testing.T) {
	s := snapshotCases()["full meta"]
	s.Data = []byte("some state bytes")
	good := streaming.MarshalSnapshot(s)
	for i := range good {
		for bit := range 8 {
			b := append([]byte(nil), good...)
			b[i] ^= 1 << bit
			_, err := streaming.UnmarshalSnapshot(b)
			require.ErrorIs(t, err, streaming.ErrCorrupt, "flip byte %d bit %d", i, bit)
		}
	}
	for n := 0; n < len(good); n++ {
		_, err := streaming.UnmarshalSnapshot(good[:n])
		require.ErrorIs(t, err, streaming.ErrCorrupt, "truncated to %d bytes", n)
	}
	_, err := streaming.UnmarshalSnapshot(append(append([]byte(nil), good...), 0))
	require.ErrorIs(t, err, streaming.ErrCorrupt, "trailing byte")
}

// resum replaces the trailing checksum so a test can reach the field checks.
func resum(b []byte) []byte {
	body := b[:len(b)-4]
	return binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

func TestSnapshotCodecErrorsSayWhatIsWrong(t *testing.T) {
	good := streaming.MarshalSnapshot(streaming.Snapshot{Data: []byte("x")})
	futureVersion := append([]byte(nil), good...)
	futureVersion[4] = 9 // the one-byte format version follows the magic
	badMagic := append([]byte(nil), good...)
	badMagic[0] = 'X'
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-5] ^= 1
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"checksum", flipped, "checksum mismatch"},
		{"short", good[:5], "truncated"},
		{"magic", resum(badMagic), "magic"},
		{"version", resum(futureVersion), "format version 9, this build reads 1 and 2"},
		{"trailing", resum(append(append([]byte(nil), good[:len(good)-4]...), 7, 0, 0, 0, 0)), "trailing bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := streaming.UnmarshalSnapshot(tc.in)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// A length or count field claiming more than the encoding holds must be
// refused without allocating for it.
func TestSnapshotCodecHugeCounts(t *testing.T) {
	b := []byte("TFSN")
	b = binary.AppendUvarint(b, streaming.SnapshotFormatVersion)
	b = append(b, 0, 0, 0) // cursor type, cursor, epoch
	b = binary.AppendUvarint(b, math.MaxUint64)
	b = append(b, 0, 0, 0)
	b = resum(append(b, 0, 0, 0, 0))
	_, err := streaming.UnmarshalSnapshot(b)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.True(t, strings.Contains(err.Error(), "operator count"), err.Error())
}

// Dropped node names (allow non-restored state) must not change the bytes
// of a snapshot that records none: those stay version 1, which every
// earlier build reads, and only a snapshot that records some is version
// 2, which earlier builds refuse rather than load the dropped nodes'
// state. A version 2 encoding that records no dropped node is refused.
func TestSnapshotCodecVersionFollowsDroppedNodes(t *testing.T) {
	s := snapshotCases()["dropped nodes"]
	without := s
	without.Meta.DroppedNodes = nil
	v1 := streaming.MarshalSnapshot(without)
	require.Equal(t, byte(streaming.SnapshotFormatVersion), v1[4])
	v2 := streaming.MarshalSnapshot(s)
	require.Equal(t, byte(streaming.SnapshotFormatVersionDropped), v2[4])

	// Version 1 as this build wrote it before dropped nodes existed: the
	// dropped count is absent, not zero.
	old := []byte("TFSN")
	old = binary.AppendUvarint(old, 1)
	old = append(old, 5, 'k', 'a', 'f', 'k', 'a', 1, 7, 3, 1, 3, 's', 'm', 'a', 3, 's', 'm', 'a', 1)
	old = append(old, 6, '9', 'f', '1', 'c', '0', 'a')
	old = binary.AppendVarint(old, 1_700_000_000_123_456_789)
	old = append(old, 5, 's', 't', 'a', 't', 'e')
	old = resum(append(old, 0, 0, 0, 0))
	require.Equal(t, old, v1)
	got, err := streaming.UnmarshalSnapshot(old)
	require.NoError(t, err)
	require.Nil(t, got.Meta.DroppedNodes)

	noneDropped := append([]byte(nil), v1...)
	noneDropped[4] = byte(streaming.SnapshotFormatVersionDropped)
	noneDropped = resum(append(append(append([]byte(nil), noneDropped[:24]...), 0), noneDropped[24:]...)) // after the one operator
	_, err = streaming.UnmarshalSnapshot(noneDropped)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.Contains(t, err.Error(), "dropped node count 0")
}

func FuzzUnmarshalSnapshot(f *testing.F) {
	for _, s := range snapshotCases() {
		if len(s.Data) < 10_000 {
			f.Add(streaming.MarshalSnapshot(s))
		}
	}
	f.Add([]byte{})
	f.Add([]byte("TFSN"))
	f.Add(resum([]byte("TFSN\x01\x00\x00\x00\xff\xff\xff\xff\x0f\x00\x00\x00\x00\x00\x00\x00")))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := streaming.UnmarshalSnapshot(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode to something that decodes to
		// the same snapshot.
		again, err := streaming.UnmarshalSnapshot(streaming.MarshalSnapshot(s))
		if err != nil {
			t.Fatalf("re-encoding of a decoded snapshot does not decode: %v", err)
		}
		require.Equal(t, s, again)
	})
}
