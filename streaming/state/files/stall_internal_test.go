package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// holdFirstPlace holds the first rename of key's file into place (as
// behind a stalled fsync) until release is closed; stalled is closed once
// it is held.
func holdFirstPlace(t *testing.T, key []byte) (stalled, release chan struct{}) {
	t.Helper()
	target := fileName(kindSnapshot, key)
	var first atomic.Bool
	stalled, release = make(chan struct{}), make(chan struct{})
	testHookPlace = func(name string) {
		if name == target && first.CompareAndSwap(false, true) {
			close(stalled)
			<-release
		}
	}
	t.Cleanup(func() { testHookPlace = nil })
	return stalled, release
}

// tempFiles counts the temporary files in s's folder.
func tempFiles(t *testing.T, s *Store) (n int) {
	t.Helper()
	entries, err := os.ReadDir(s.Dir())
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			n++
		}
	}
	return n
}

// The caller's goroutine never does file I/O: while the I/O goroutines are
// stuck (here: the only one is held by a job standing in for a stalled
// disk), every call gives up at its ctx deadline instead of hanging, and
// nothing it was asked to do takes effect.
func TestCallerGivesUpWhileDiskStalls(t *testing.T) {
	s, err := Open(t.TempDir(), WithIOWorkers(1))
	require.NoError(t, err)
	defer s.Close()

	stalled, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.submit(context.Background(), func() { close(stalled); <-release }))
	<-stalled

	calls := map[string]func(ctx context.Context) error{
		"Save": func(ctx context.Context) error {
			return s.Save(ctx, []byte("k"), streaming.Snapshot{Data: []byte("v")})
		},
		"SaveBatch": func(ctx context.Context) error {
			return s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: []byte("b"), Snapshot: streaming.Snapshot{}}})
		},
		"Load":     func(ctx context.Context) error { _, err := s.Load(ctx, []byte("k")); return err },
		"ListKeys": func(ctx context.Context) error { _, err := s.ListKeys(ctx); return err },
		"Delete":   func(ctx context.Context) error { return s.Delete(ctx, []byte("k")) },
		"SaveCursor": func(ctx context.Context) error {
			return s.SaveCursor(ctx, []byte("c"), streaming.CursorRecord{Epoch: 1})
		},
		"LoadCursor": func(ctx context.Context) error { _, err := s.LoadCursor(ctx, []byte("c")); return err },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := call(ctx)
		cancel()
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", name, err)
	}
	close(release)

	ctx := context.Background()
	_, err = s.Load(ctx, []byte("k"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "the abandoned Save never ran")
	_, err = s.Load(ctx, []byte("b"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "the abandoned SaveBatch never ran")
	require.NoError(t, s.Save(ctx, []byte("k"), streaming.Snapshot{Data: []byte("v")}))
}

// TestLateWriteNeverReplacesALaterOne: a write whose caller gave up (here
// its rename waits, as behind a stalled fsync) lands
// after a later write of the same key was called and completed. The
// later one must stay: a checkpoint manifest that went back to an older
// one would name pieces a newer checkpoint deleted. Bug: the late rename
// replaced the newer file.
func TestLateWriteNeverReplacesALaterOne(t *testing.T) {
	key := []byte("shard/manifest")
	one := func(s *Store, ctx context.Context, data string) error {
		return s.Save(ctx, key, streaming.Snapshot{Data: []byte(data)})
	}
	batch := func(n int) func(s *Store, ctx context.Context, data string) error {
		return func(s *Store, ctx context.Context, data string) error {
			items := []streaming.KeyedSnapshot{{Key: key, Snapshot: streaming.Snapshot{Data: []byte(data)}}}
			for i := range n - 1 {
				items = append(items, streaming.KeyedSnapshot{Key: fmt.Appendf(nil, "shard/piece/%s/%d", data, i), Snapshot: streaming.Snapshot{Data: []byte(data)}})
			}
			return s.SaveBatch(ctx, items)
		}
	}
	for name, save := range map[string]func(*Store, context.Context, string) error{
		"Save": one, "SaveBatch": batch(2), "SaveBatch/syncfs": batch(syncfsMinBatch),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.TempDir(), WithIOWorkers(4))
			require.NoError(t, err)
			defer s.Close()
			stalled, release := holdFirstPlace(t, key)

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- save(s, ctx, "old") }()
			<-stalled // the old write waits to rename its file
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled, "the caller gives up")
			require.NoError(t, save(s, context.Background(), "new"))
			close(release)
			require.Eventually(t, func() bool {
				s.order.mu.Lock()
				defer s.order.mu.Unlock()
				return len(s.order.files) == 0 && tempFiles(t, s) == 0
			}, 10*time.Second, time.Millisecond, "the late write never ended, or left temporary files")
			snap, err := s.Load(context.Background(), key)
			require.NoError(t, err)
			require.Equal(t, "new", string(snap.Data), "the late write replaced the later one")
		})
	}
}

// TestBatchGivenUpDuringSyncfsLeavesNoTemporaryFiles: a batch written
// with one syncfs whose caller gives up while the flush is stalled
// renames nothing, and its temporary files go once the flush ends. Bug:
// they stayed until the next Open, one batch's worth per checkpoint that
// timed out on a stalled disk.
func TestBatchGivenUpDuringSyncfsLeavesNoTemporaryFiles(t *testing.T) {
	if !haveSyncfs {
		t.Skip("no syncfs here: batches fsync each file")
	}
	s, err := Open(t.TempDir(), WithIOWorkers(2))
	require.NoError(t, err)
	defer s.Close()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookSyncFS = func() { once.Do(func() { close(held); <-release }) }
	t.Cleanup(func() { testHookSyncFS = nil })
	var items []streaming.KeyedSnapshot
	for i := range syncfsMinBatch {
		items = append(items, streaming.KeyedSnapshot{Key: fmt.Appendf(nil, "shard/piece/%d", i), Snapshot: streaming.Snapshot{Data: []byte("v")}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.SaveBatch(ctx, items) }()
	<-held // every temporary file is written; the flush stalls
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	close(release)
	require.Eventually(t, func() bool { return tempFiles(t, s) == 0 }, 10*time.Second, time.Millisecond, "the abandoned batch's temporary files stayed")
	for _, it := range items {
		_, err := s.Load(context.Background(), it.Key)
		require.ErrorIs(t, err, streaming.ErrNotFound, "the abandoned batch renamed %s", it.Key)
	}
}

// TestLateWriteNeverBringsBackADeletedKey: a write whose caller gave up
// (its rename waits, as behind a stalled fsync) lands after a later
// Delete of the key. The key must stay deleted. Bug: the late rename
// put the file back, so every piece of a checkpoint that timed out on a
// stalled disk, deleted as unreferenced, came back and stayed for ever.
func TestLateWriteNeverBringsBackADeletedKey(t *testing.T) {
	key := []byte("shard/piece/1/7/0")
	for name, del := range map[string]func(*Store, context.Context) error{
		"Delete":     func(s *Store, ctx context.Context) error { return s.Delete(ctx, key) },
		"DeleteKeys": func(s *Store, ctx context.Context) error { return s.DeleteKeys(ctx, [][]byte{[]byte("other"), key}) },
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.TempDir(), WithIOWorkers(4))
			require.NoError(t, err)
			defer s.Close()
			stalled, release := holdFirstPlace(t, key)

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- s.Save(ctx, key, streaming.Snapshot{Data: []byte("late")}) }()
			<-stalled // the write waits to rename its file
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled, "the caller gives up")
			require.NoError(t, del(s, context.Background()))
			close(release)
			require.Eventually(t, func() bool {
				s.order.mu.Lock()
				defer s.order.mu.Unlock()
				return len(s.order.files) == 0
			}, 10*time.Second, time.Millisecond, "the late write never ended")
			_, err = s.Load(context.Background(), key)
			require.ErrorIs(t, err, streaming.ErrNotFound, "the late write brought the deleted key back")
			entries, err := os.ReadDir(s.Dir())
			require.NoError(t, err)
			for _, e := range entries {
				require.False(t, strings.HasPrefix(e.Name(), ".tmp-"), "the dropped write left its temporary file")
			}
		})
	}
}
