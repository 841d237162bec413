package files_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

func open(t *testing.T, dir string, opts ...files.Option) *files.Store {
	t.Helper()
	s, err := files.Open(dir, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) streaming.StateStore { return open(t, t.TempDir()) })
	statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore { return open(t, t.TempDir()) })
	// One Store per folder (Open locks it): its two writers share it.
	statetest.RunConditionalSaver(t, func(t *testing.T) (a, b streaming.StateStore) {
		s := open(t, t.TempDir())
		return s, s
	})
}

// With one I/O goroutine every call queues behind the others: the suite
// must still pass (no deadlock between SaveBatch and its own jobs).
func TestConformanceOneWorker(t *testing.T) {
	statetest.Run(t, func(t *testing.T) streaming.StateStore {
		return open(t, t.TempDir(), files.WithIOWorkers(1), files.WithSync(false))
	})
}

func TestPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	long := bytes.Repeat([]byte("k/"), 300)
	s, err := files.Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.SaveBatch(ctx, []streaming.KeyedSnapshot{
		{Key: []byte("a/b"), Snapshot: streaming.Snapshot{Data: []byte("v1")}},
		{Key: long, Snapshot: streaming.Snapshot{Data: []byte("v2")}},
	}))
	require.NoError(t, s.SaveCursor(ctx, []byte("p0"), streaming.CursorRecord{Type: "kafka", Epoch: 3, CheckpointID: 8}))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	require.ErrorIs(t, s.Save(ctx, []byte("x"), streaming.Snapshot{}), files.ErrClosed)

	s = open(t, dir)
	got, err := s.Load(ctx, []byte("a/b"))
	require.NoError(t, err)
	require.Equal(t, []byte("v1"), got.Data)
	got, err = s.Load(ctx, long)
	require.NoError(t, err)
	require.Equal(t, []byte("v2"), got.Data)
	keys, err := s.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.ErrorIs(t, s.SaveCursor(ctx, []byte("p0"), streaming.CursorRecord{Epoch: 2}), streaming.ErrFenced)
}

func TestFolderIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	_, err := files.Open(dir)
	require.ErrorIs(t, err, files.ErrLocked)
	require.NoError(t, s.Close())
	open(t, dir) // released by Close
}

// A crash between writing a temporary file and renaming it leaves the
// temporary file behind; it is never listed or loaded, and Open removes it.
func TestStaleTemporaryFilesIgnoredAndRemoved(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir)
	require.NoError(t, s.Save(ctx, []byte("k"), streaming.Snapshot{Data: []byte("old")}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half-written"), 0o600))
	keys, err := s.ListKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("k")}, keys)
	require.NoError(t, s.Close())

	s = open(t, dir)
	_, err = os.Stat(filepath.Join(dir, ".tmp-123"))
	require.ErrorIs(t, err, os.ErrNotExist)
	got, err := s.Load(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, []byte("old"), got.Data)
}

func TestFileNamesAreSafe(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir)
	keys := [][]byte{{}, []byte("../../etc/passwd"), []byte("a/b"), []byte("A"), []byte("a"), {0, 0xff}, bytes.Repeat([]byte{'x'}, 1000)}
	for _, k := range keys {
		require.NoError(t, s.Save(ctx, k, streaming.Snapshot{Data: k}))
		require.NoError(t, s.SaveCursor(ctx, k, streaming.CursorRecord{Cursor: k}))
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		require.False(t, e.IsDir(), "no key creates a folder: %s", e.Name())
		require.LessOrEqual(t, len(e.Name()), 255)
		require.Regexp(t, `^(LOCK|[sc]h?-[0-9a-v]*)$`, e.Name())
		names = append(names, strings.ToLower(e.Name()))
	}
	// Names stay distinct on a case-insensitive file system.
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(keys)*2+1)
}

func TestCorruptFileNamesKeyAndFile(t *testing.T) {
	tests := []struct {
		name   string
		mangle func(b []byte) []byte
		want   string
	}{
		{"flipped data", func(b []byte) []byte { b[len(b)-6] ^= 1; return b }, "checksum mismatch"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-3] }, "snapshot:"},
		{"key header", func(b []byte) []byte { b[2] ^= 1; return b }, "key header checksum mismatch"},
		{"empty file", func([]byte) []byte { return nil }, "key header truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			s := open(t, dir)
			require.NoError(t, s.Save(ctx, []byte("a/b"), streaming.Snapshot{Data: []byte("some state")}))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var path string
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "s-") {
					path = filepath.Join(dir, e.Name())
				}
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, tc.mangle(b), 0o600))
			_, err = s.Load(ctx, []byte("a/b"))
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.ErrorContains(t, err, `snapshot key "a/b" (file `+path+`)`)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestOpenValidates(t *testing.T) {
	tests := []struct {
		name string
		opt  files.Option
		want string
	}{
		{"no workers", files.WithIOWorkers(0), "I/O workers"},
		{"unreadable mode", files.WithFileMode(0o200), "file mode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := files.Open(t.TempDir(), tc.opt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestFileMode(t *testing.T) {
	for _, mode := range []uint32{0o600, 0o640} {
		t.Run(fmt.Sprintf("%#o", mode), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, files.WithFileMode(mode))
			ctx := context.Background()
			require.NoError(t, s.Save(ctx, []byte("k"), streaming.Snapshot{}))
			var items []streaming.KeyedSnapshot
			for i := range 100 { // large enough for the syncfs path
				items = append(items, streaming.KeyedSnapshot{Key: fmt.Appendf(nil, "b%d", i)})
			}
			require.NoError(t, s.SaveBatch(ctx, items))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries {
				if e.Name() == "LOCK" {
					continue
				}
				fi, err := e.Info()
				require.NoError(t, err)
				require.Equal(t, os.FileMode(mode), fi.Mode().Perm(), e.Name())
			}
		})
	}
}
