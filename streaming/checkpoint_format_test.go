package streaming_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/wire"
	"github.com/tflo-io/tflo/streaming"
)

// goldenV1 holds every record a fixed sequence of checkpoints wrote with
// the first on-store format (manifest version 1, snapshot format 1),
// recorded before the format moved into checkpoint_format.go. Regenerate
// it only for a new format version, never to make a test pass:
// TFLO_WRITE_GOLDEN=1 go test -run TestCheckpointFormat ./streaming/
var goldenV1 = filepath.Join("testdata", "checkpoint-format-v1.golden")

// goldenRun is the fixed sequence: four checkpoints at epoch 3 with two
// runs at most, so the record set holds pieces, a merged run, a manifest
// and a cursor.
func goldenRun(t *testing.T) (*tinyStore, map[string]int64) {
	t.Helper()
	st := newTinyStore()
	src := newCounterSource()
	clk := newFakeClock()
	var own owner
	own.set(3, true)
	cp := newCP(t, src, st, st, streaming.WithClock(clk.Now), streaming.WithMaxRuns(2), streaming.WithOwnership(&own),
		streaming.WithOperators([]streaming.OperatorInfo{{Node: "sum", Operator: "counter", TypeVersion: 2}}),
		streaming.WithSchemaFingerprint("fp-1"))
	for round := range 4 {
		for k := range 9 {
			if (k+round)%3 != 0 {
				src.Apply(fmt.Sprintf("sensor-%02d", k), int64(round*10+k))
			}
		}
		clk.Advance(time.Second)
		_, err := cp.Checkpoint(context.Background())
		require.NoError(t, err)
	}
	want, _ := src.snapshot()
	return st, want
}

// encodeRecords writes the store's records as the bytes a store keeps:
// each state key with MarshalSnapshot, each cursor with
// MarshalCursorRecord, in key order.
func encodeRecords(st *tinyStore) []byte {
	var b []byte
	put := func(kind byte, key string, val []byte) {
		b = append(b, kind)
		b = binary.AppendUvarint(b, uint64(len(key)))
		b = append(b, key...)
		b = binary.AppendUvarint(b, uint64(len(val)))
		b = append(b, val...)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(st.state)) {
		put('s', k, streaming.MarshalSnapshot(st.state[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(st.cursors)) {
		put('c', k, streaming.MarshalCursorRecord(st.cursors[k]))
	}
	return b
}

func decodeRecords(t *testing.T, b []byte) *tinyStore {
	t.Helper()
	st := newTinyStore()
	r := wire.Reader{B: b}
	for r.Off < len(b) && r.Err == nil {
		kind := b[r.Off]
		r.Off++
		key := r.Str()
		val := r.Bytes()
		require.NoError(t, r.Err)
		switch kind {
		case 's':
			s, err := streaming.UnmarshalSnapshot(val)
			require.NoError(t, err, "record %q", key)
			st.state[key] = s
		case 'c':
			rec, err := streaming.UnmarshalCursorRecord(val)
			require.NoError(t, err, "cursor %q", key)
			st.cursors[key] = rec
		default:
			t.Fatalf("golden file: unknown record kind %q", kind)
		}
	}
	require.NoError(t, r.Err)
	return st
}

// TestCheckpointFormatWritesV1Bytes: the checkpoint walk writes exactly
// the bytes the first format wrote, record for record.
func TestCheckpointFormatWritesV1Bytes(t *testing.T) {
	st, _ := goldenRun(t)
	got := encodeRecords(st)
	if os.Getenv("TFLO_WRITE_GOLDEN") == "1" {
		require.NoError(t, os.MkdirAll(filepath.Dir(goldenV1), 0o755))
		require.NoError(t, os.WriteFile(goldenV1, got, 0o644))
	}
	want, err := os.ReadFile(goldenV1)
	require.NoError(t, err)
	require.Equal(t, decodeRecords(t, want).keys(), st.keys(), "record keys")
	require.Equal(t, want, got, "on-store bytes differ from format v1")
}

// TestCheckpointFormatReadsV1 restores from the recorded v1 records: data
// written before the format moved is read back exactly.
func TestCheckpointFormatReadsV1(t *testing.T) {
	want, err := os.ReadFile(goldenV1)
	require.NoError(t, err)
	st := decodeRecords(t, want)
	fresh := newCounterSource()
	info, err := newCP(t, fresh, st, st).Restore(context.Background())
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(4), info.ID)
	require.Equal(t, streaming.Epoch(3), info.Epoch)
	got, seq := fresh.snapshot()
	_, wantState := goldenRun(t)
	require.Equal(t, wantState, got)
	require.Equal(t, seqOf(info.Cursor), seq)
	rec, err := st.LoadCursor(context.Background(), []byte("sensors/p0"))
	require.NoError(t, err)
	require.Equal(t, uint64(4), rec.CheckpointID)
}

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
