package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
)

func snap(s string) streaming.Snapshot { return streaming.Snapshot{Data: []byte(s)} }

func TestFailNext(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	s := faults.Wrap(mem, mem)
	s.FailNext(faults.OpSave, 2)
	for range 2 {
		err := s.Save(ctx, []byte("k"), snap("v"))
		require.ErrorIs(t, err, faults.ErrInjected)
		require.ErrorContains(t, err, `Save "k"`)
	}
	_, err := mem.Load(ctx, []byte("k"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "a failed write changes nothing")
	require.NoError(t, s.Save(ctx, []byte("k"), snap("v")))
	require.Equal(t, 3, s.Calls(faults.OpSave))
	require.Equal(t, 1, s.Writes())
}

func TestHangUntilDeadline(t *testing.T) {
	mem := memory.New()
	s := faults.Wrap(mem, mem)
	s.Hang(faults.OpSaveCursor)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := s.SaveCursor(ctx, []byte("c"), streaming.CursorRecord{Type: "seq"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = mem.LoadCursor(context.Background(), []byte("c"))
	require.ErrorIs(t, err, streaming.ErrNotFound)
	s.Heal()
	require.NoError(t, s.SaveCursor(context.Background(), []byte("c"), streaming.CursorRecord{Type: "seq"}))
}

func TestCrashAfter(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		partial  func(int) int
		survived []string
	}{
		{"atomic batch", nil, []string{"a"}},
		{"torn batch", func(n int) int { return n / 2 }, []string{"a", "b1", "b2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.New()
			s := faults.Wrap(mem, mem)
			s.CrashAfter(1, tc.partial)
			require.NoError(t, s.Save(ctx, []byte("a"), snap("1")))
			batch := []streaming.KeyedSnapshot{{Key: []byte("b1"), Snapshot: snap("x")}, {Key: []byte("b2"), Snapshot: snap("x")}, {Key: []byte("b3"), Snapshot: snap("x")}, {Key: []byte("b4"), Snapshot: snap("x")}}
			require.ErrorIs(t, s.SaveBatch(ctx, batch), faults.ErrCrashed)
			require.True(t, s.Crashed())
			require.ErrorIs(t, s.Delete(ctx, []byte("a")), faults.ErrCrashed, "every later write fails too")
			keys, err := s.ListKeys(ctx)
			require.NoError(t, err, "reads still work after the crash")
			var got []string
			for _, k := range keys {
				got = append(got, string(k))
			}
			require.ElementsMatch(t, tc.survived, got)
		})
	}
}

// heldStore holds every Save until release is closed, counting the Saves
// that reached it in entered.
type heldStore struct {
	*memory.Store
	entered chan struct{}
	release chan struct{}
}

func (h *heldStore) Save(ctx context.Context, key []byte, s streaming.Snapshot) error {
	h.entered <- struct{}{}
	<-h.release
	return h.Store.Save(ctx, key, s)
}

// TestCrashAfterConcurrentWrites: writes racing to the crash point all
// passed the check before any of them was counted, so CrashAfter(1) let
// every one of them through. Exactly one lands; the others are refused.
func TestCrashAfterConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	const n = 4
	mem := memory.New()
	held := &heldStore{Store: mem, entered: make(chan struct{}, n), release: make(chan struct{})}
	s := faults.Wrap(held, mem)
	s.CrashAfter(1, nil)
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- s.Save(ctx, []byte{'k', byte('0' + i)}, snap("v")) }()
	}
	// Every Save is either held in the inner store or already refused.
	require.Eventually(t, func() bool { return len(held.entered)+len(errs) == n }, 10*time.Second, time.Millisecond)
	close(held.release)
	var refused int
	for range n {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, faults.ErrCrashed)
			refused++
		}
	}
	keys, err := mem.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1, "CrashAfter(1): one write lands, whatever runs at once")
	require.Equal(t, n-1, refused)
	require.Equal(t, 1, s.Writes())
	require.True(t, s.Crashed())
}

// refreshCounter is a state store that caches what it read, as the S3
// store does: it counts the RefreshKey calls that reach it.
type refreshCounter struct {
	*memory.Store
	refreshed [][]byte
}

func (r *refreshCounter) RefreshKey(_ context.Context, key []byte) error {
	r.refreshed = append(r.refreshed, key)
	return nil
}

// TestOptionalCapabilitiesReachTheInnerStore: the checkpointer deletes
// unreferenced pieces with one DeleteKeys and has a caching store
// (S3's) reread a shard's manifest at a restore with RefreshKey, where
// the store has them. Store had neither, so a store under test behaved
// otherwise through the wrapper: one Delete a piece, and a worker
// regaining a shard on S3 restored its own older, cached checkpoint.
func TestOptionalCapabilitiesReachTheInnerStore(t *testing.T) {
	ctx := context.Background()
	inner := &refreshCounter{Store: memory.New()}
	s := faults.Wrap(inner, inner)
	var st streaming.StateStore = s
	d, ok := st.(interface {
		DeleteKeys(context.Context, [][]byte) error
	})
	require.True(t, ok, "Store forwards DeleteKeys")
	r, ok := st.(interface {
		RefreshKey(context.Context, []byte) error
	})
	require.True(t, ok, "Store forwards RefreshKey")

	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, s.Save(ctx, []byte(k), snap(k)))
	}
	s.FailNext(faults.OpDeleteKeys, 1)
	require.ErrorIs(t, d.DeleteKeys(ctx, [][]byte{[]byte("a"), []byte("b")}), faults.ErrInjected)
	require.NoError(t, d.DeleteKeys(ctx, [][]byte{[]byte("a"), []byte("b")}))
	for _, k := range []string{"a", "b"} {
		_, err := inner.Load(ctx, []byte(k))
		require.ErrorIs(t, err, streaming.ErrNotFound, k)
	}
	_, err := inner.Load(ctx, []byte("c"))
	require.NoError(t, err)
	require.Equal(t, 2, s.Calls(faults.OpDeleteKeys))
	require.Zero(t, s.Calls(faults.OpDelete), "one batch, not a Delete a key")
	require.Equal(t, 4, s.Writes(), "three saves and the batch")

	s.CrashAfter(0, nil)
	require.ErrorIs(t, d.DeleteKeys(ctx, [][]byte{[]byte("c")}), faults.ErrCrashed)
	s.Heal()

	require.NoError(t, r.RefreshKey(ctx, []byte("manifest")))
	require.Equal(t, [][]byte{[]byte("manifest")}, inner.refreshed)
	s.FailNext(faults.OpRefreshKey, 1)
	require.ErrorIs(t, r.RefreshKey(ctx, []byte("manifest")), faults.ErrInjected)
	require.Len(t, inner.refreshed, 1)

	l, ok := st.(streaming.ShardKeyLister)
	require.True(t, ok, "Store forwards ListShardKeys")
	keys, err := l.ListShardKeys(ctx, "s")
	require.NoError(t, err)
	require.Len(t, keys, 1, "an inner store without it lists every key: %q", keys)
	s.FailNext(faults.OpListKeys, 1)
	_, err = l.ListShardKeys(ctx, "s")
	require.ErrorIs(t, err, faults.ErrInjected)

	// A store without the capabilities: one Delete a key, no refresh.
	plain := faults.Wrap(plainStore{memory.New()}, nil)
	require.NoError(t, plain.Save(ctx, []byte("x"), snap("x")))
	require.NoError(t, plain.DeleteKeys(ctx, [][]byte{[]byte("x")}))
	require.NoError(t, plain.RefreshKey(ctx, []byte("x")))
	_, err = plain.Load(ctx, []byte("x"))
	require.ErrorIs(t, err, streaming.ErrNotFound)
}

// plainStore has only the StateStore methods.
type plainStore struct{ streaming.StateStore }

// TestConditionalSaveReachesTheInnerStore: a Checkpointer commits its
// manifests with SaveIfUnchanged on a streaming.ConditionalSaver, but
// Store was none whatever it wrapped, so every checkpoint through it took
// the unconditional Save, and no fault test reached the conditional one.
// Store is one when (and only when) the inner store is, and the faults
// target it as OpSaveIfUnchanged.
func TestConditionalSaveReachesTheInnerStore(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	var st streaming.StateStore = faults.Wrap(mem, mem)
	s := st.(faults.Store)
	cs, ok := st.(streaming.ConditionalSaver)
	require.True(t, ok, "Store over a ConditionalSaver is one")
	save := func(read *streaming.Snapshot, v string) ([]error, error) {
		return cs.SaveIfUnchanged(ctx, []streaming.ConditionalSave{{KeyedSnapshot: streaming.KeyedSnapshot{Key: []byte("m"), Snapshot: snap(v)}, Read: read}})
	}

	s.FailNext(faults.OpSaveIfUnchanged, 1)
	_, err := save(nil, "1")
	require.ErrorIs(t, err, faults.ErrInjected)
	require.ErrorContains(t, err, `SaveIfUnchanged "m"`)
	_, err = mem.Load(ctx, []byte("m"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "a failed conditional save changes nothing")

	refused, err := save(nil, "1")
	require.NoError(t, err)
	require.Equal(t, []error{nil}, refused)
	first, err := mem.Load(ctx, []byte("m")) // what a writer read
	require.NoError(t, err)
	refused, err = save(nil, "2") // read nothing, but "1" is stored
	require.NoError(t, err)
	require.Len(t, refused, 1)
	require.ErrorIs(t, refused[0], streaming.ErrConflict, "the inner store's refusal comes through")
	got, err := mem.Load(ctx, []byte("m"))
	require.NoError(t, err)
	require.Equal(t, "1", string(got.Data))
	require.Equal(t, 3, s.Calls(faults.OpSaveIfUnchanged))
	require.Zero(t, s.Calls(faults.OpSave)+s.Calls(faults.OpSaveBatch))
	require.Equal(t, 2, s.Writes())

	s.Hang(faults.OpSaveIfUnchanged)
	hctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = cs.SaveIfUnchanged(hctx, []streaming.ConditionalSave{{KeyedSnapshot: streaming.KeyedSnapshot{Key: []byte("m"), Snapshot: snap("3")}, Read: &first}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	s.Heal()
	s.CrashAfter(0, nil)
	_, err = save(&first, "3")
	require.ErrorIs(t, err, faults.ErrCrashed)
	require.True(t, s.Crashed())
	got, err = mem.Load(ctx, []byte("m"))
	require.NoError(t, err)
	require.Equal(t, "1", string(got.Data), "neither the hung nor the crashed save landed")
	s.Heal()
	refused, err = save(&first, "3")
	require.NoError(t, err)
	require.Equal(t, []error{nil}, refused)

	// A store without it: neither is the wrapper, so a Checkpointer
	// saves through it as it would without the wrapper.
	_, ok = faults.Wrap(plainStore{memory.New()}, nil).(streaming.ConditionalSaver)
	require.False(t, ok, "Store over a store without SaveIfUnchanged has none")
}
