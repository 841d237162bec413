package streaming_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
)

// A zombie owner whose fence read the manifest just before the newer
// owner's first commit must not replace that commit: its save, conditional
// on what the fence read, is refused and it is fenced as a zombie the read
// caught is (TestZombieManifestRefused).
func TestZombieManifestRefusedBetweenFenceAndSave(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) streaming.StateStore
	}{
		{"files", func(t *testing.T) streaming.StateStore {
			s, err := files.Open(t.TempDir())
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			return s
		}},
		{"badger", func(t *testing.T) streaming.StateStore {
			s, err := badgerstore.Open(badgerstore.WithPath(t.TempDir()))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			return s
		}},
		{"memory through faults.Wrap", func(t *testing.T) streaming.StateStore {
			mem := memory.New()
			return faults.Wrap(mem, mem)
		}},
	}
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := tc.open(t)
			cs := st.(streaming.CursorStore)
			zombieSrc, newSrc := newCounterSource(), newCounterSource()
			hooked := &beforeManifestSave{StateStore: st}
			zombie := newCP(t, zombieSrc, hooked, cs, streaming.WithOwnership(&owner{epoch: 1, owns: true}))
			next := newCP(t, newSrc, st, cs, streaming.WithOwnership(&owner{epoch: 2, owns: true}))

			zombieSrc.Apply("a", 100)
			info, err := zombie.Snapshot(ctx, 1)
			require.NoError(t, err)
			hooked.hook = func() {
				newSrc.Apply("a", 1)
				_, err := next.Checkpoint(ctx)
				require.NoError(t, err)
			}
			_, err = zombie.SaveState(ctx, info.ID)
			require.Nil(t, hooked.hook, "the newer owner committed between the zombie's fence and its save")
			require.ErrorIs(t, err, streaming.ErrFenced)
			var noe *streaming.NotOwnerError
			require.ErrorAs(t, err, &noe)
			require.Equal(t, streaming.Epoch(1), noe.Epoch)
			require.Equal(t, streaming.Epoch(2), noe.CurrentEpoch)
			require.Equal(t, streaming.StageSaveState, noe.Stage)

			check := newCounterSource()
			_, err = newCP(t, check, st, cs).Restore(ctx)
			require.NoError(t, err)
			got, _ := check.snapshot()
			require.Equal(t, map[string]int64{"a": 1}, got, "the newer owner's manifest stays")
		})
	}
}

// beforeManifestSave runs hook (once) just before the first save of a
// checkpoint manifest through it: between a Checkpointer's fence, which
// reads the manifest, and its save.
type beforeManifestSave struct {
	streaming.StateStore
	hook func()
}

func (s *beforeManifestSave) fire(keys ...[]byte) {
	for _, k := range keys {
		if s.hook != nil && bytes.HasSuffix(k, []byte("/manifest")) {
			hook := s.hook
			s.hook = nil
			hook()
		}
	}
}

func (s *beforeManifestSave) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	s.fire(key)
	return s.StateStore.Save(ctx, key, snap)
}

func (s *beforeManifestSave) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	for _, it := range items {
		s.fire(it.Key)
	}
	return s.StateStore.SaveBatch(ctx, items)
}

func (s *beforeManifestSave) SaveIfUnchanged(ctx context.Context, items []streaming.ConditionalSave) ([]error, error) {
	for _, it := range items {
		s.fire(it.Key)
	}
	return s.StateStore.(streaming.ConditionalSaver).SaveIfUnchanged(ctx, items)
}

// TestFailedConditionalManifestSaveLosesNothing: faults.Wrap hid its
// store's SaveIfUnchanged, so through it a checkpoint's manifest took the
// unconditional Save and no fault reached the conditional one. A failed
// or hung SaveIfUnchanged of the manifest fails its checkpoint at the
// save stage, and the next checkpoint commits everything.
func TestFailedConditionalManifestSaveLosesNothing(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fs := faults.Wrap(mem, mem)
	src := newCounterSource()
	cp := newCP(t, src, fs, fs, streaming.WithStageTimeouts(time.Second, 100*time.Millisecond, time.Second))
	src.Apply("a", 1)
	_, err := cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, fs.Calls(faults.OpSaveIfUnchanged), "the manifest is saved conditionally")

	fs.FailNext(faults.OpSaveIfUnchanged, 1)
	src.Apply("a", 2)
	_, err = cp.Checkpoint(ctx)
	require.ErrorIs(t, err, faults.ErrInjected)
	var se *streaming.StageError
	require.ErrorAs(t, err, &se)
	require.Equal(t, streaming.StageSaveState, se.Stage)

	fs.Hang(faults.OpSaveIfUnchanged)
	src.Apply("b", 3)
	_, err = cp.Checkpoint(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 2, cp.Status().ConsecutiveFailures)

	fs.Heal()
	src.Apply("c", 4)
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Zero(t, fs.Calls(faults.OpSave), "no manifest took the unconditional save")

	fresh := newCounterSource()
	_, err = newCP(t, fresh, mem, mem).Restore(ctx)
	require.NoError(t, err)
	want, _ := src.snapshot()
	got, _ := fresh.snapshot()
	require.Equal(t, want, got)
}
