package streaming_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestCursorRecordCodec(t *testing.T) {
	tests := map[string]streaming.CursorRecord{
		"zero":   {},
		"kafka":  {Type: "kafka", Cursor: []byte{1, 2, 3}, Epoch: 7, CheckpointID: 99},
		"binary": {Type: "mqtt", Cursor: []byte{0, 0xff, 0}, Epoch: 1 << 63, CheckpointID: 1<<64 - 1},
	}
	for name, rec := range tests {
		t.Run(name, func(t *testing.T) {
			b := streaming.MarshalCursorRecord(rec)
			got, err := streaming.UnmarshalCursorRecord(b)
			require.NoError(t, err)
			require.Equal(t, rec, got)
			for i := range b {
				c := append([]byte(nil), b...)
				c[i] ^= 0x10
				_, err := streaming.UnmarshalCursorRecord(c)
				require.ErrorIs(t, err, streaming.ErrCorrupt, "flipped byte %d", i)
			}
			for n := range len(b) {
				_, err := streaming.UnmarshalCursorRecord(b[:n])
				require.ErrorIs(t, err, streaming.ErrCorrupt, "truncated to %d", n)
			}
		})
	}
}

func TestCheckCursorFence(t *testing.T) {
	stored := streaming.CursorRecord{Epoch: 5}
	require.NoError(t, streaming.CheckCursorFence([]byte("k"), stored, streaming.CursorRecord{Epoch: 5}))
	require.NoError(t, streaming.CheckCursorFence([]byte("k"), stored, streaming.CursorRecord{Epoch: 6}))
	err := streaming.CheckCursorFence([]byte("a/b"), stored, streaming.CursorRecord{Epoch: 4})
	require.ErrorIs(t, err, streaming.ErrFenced)
	require.Contains(t, err.Error(), `cursor key "a/b": writer epoch 4 is older than the stored epoch 5`)
}

func FuzzUnmarshalCursorRecord(f *testing.F) {
	f.Add(streaming.MarshalCursorRecord(streaming.CursorRecord{Type: "kafka", Cursor: []byte("x"), Epoch: 3, CheckpointID: 4}))
	f.Add([]byte("TFCR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := streaming.UnmarshalCursorRecord(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		again, err := streaming.UnmarshalCursorRecord(streaming.MarshalCursorRecord(rec))
		require.NoError(t, err)
		require.Equal(t, rec, again)
	})
}
