package streaming_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/faults"
)

// owner is a switchable Ownership for tests.
type owner struct {
	mu    sync.Mutex
	epoch streaming.Epoch
	owns  bool
}

func (o *owner) Owner() (streaming.Epoch, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.epoch, o.owns
}

func (o *owner) set(e streaming.Epoch, owns bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch, o.owns = e, owns
}

func newCP(t *testing.T, src streaming.CheckpointSource, st streaming.StateStore, cs streaming.CursorStore, opts ...streaming.CheckpointerOption) *streaming.Checkpointer {
	t.Helper()
	cp, err := streaming.NewCheckpointer("sensors/p0", src, st, cs, opts...)
	require.NoError(t, err)
	return cp
}

// checkpointedA is newCP's checkpointer once src applied "a" = 1 and a
// checkpoint of it was saved.
func checkpointedA(t *testing.T, src *counterSource, st streaming.StateStore, cs streaming.CursorStore, opts ...streaming.CheckpointerOption) *streaming.Checkpointer {
	t.Helper()
	cp := newCP(t, src, st, cs, opts...)
	src.Apply("a", 1)
	_, err := cp.Checkpoint(context.Background())
	require.NoError(t, err)
	return cp
}

// restored restores st's newest checkpoint into a fresh source and returns
// the state it holds.
func restored(t *testing.T, st *tinyStore) map[string]int64 {
	t.Helper()
	return restoredWith(t, st)
}

func seqOf(c []byte) uint64 { return binary.BigEndian.Uint64(c) }

func TestCheckpointRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	cp := newCP(t, src, st, st)

	for i := range 20 {
		src.Apply(fmt.Sprintf("k%02d", i%10), int64(i))
	}
	res1, err := cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(1), res1.ID)
	require.Equal(t, uint64(20), seqOf(res1.Cursor))
	require.Positive(t, res1.Bytes)

	// Only k03 and k04 change: the second checkpoint is incremental.
	src.Apply("k03", 100)
	src.Apply("k04", -5)
	res2, err := cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(2), res2.ID)
	require.Equal(t, 1, res2.Pieces, "two dirty keys fit one piece")
	require.Less(t, res2.Bytes, res1.Bytes)
	want, wantSeq := src.snapshot()

	src.Apply("k05", 7) // after the last checkpoint: lost by a crash, replayed from the cursor

	rec, err := st.LoadCursor(ctx, []byte("sensors/p0"))
	require.NoError(t, err)
	require.Equal(t, uint64(2), rec.CheckpointID)
	require.Equal(t, wantSeq, seqOf(rec.Cursor))

	fresh := newCounterSource()
	cp2 := newCP(t, fresh, st, st)
	info, err := cp2.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(2), info.ID)
	require.Equal(t, wantSeq, seqOf(info.Cursor))
	got, gotSeq := fresh.snapshot()
	require.Equal(t, want, got)
	require.Equal(t, wantSeq, gotSeq)

	// Numbering continues after the restored manifest.
	fresh.Apply("k00", 1)
	res3, err := cp2.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(3), res3.ID)

	s := cp2.Status()
	require.Equal(t, streaming.CheckpointID(3), s.LastID)
	require.Equal(t, streaming.BreakerClosed, s.Breaker)
	require.Zero(t, s.InFlightID)
	require.Equal(t, 3, s.Runs)
	require.Contains(t, s.LastCursor, "seq:")
}

func TestRestoreWithNothingStored(t *testing.T) {
	st := newTinyStore()
	src := newCounterSource()
	src.Apply("a", 1)
	_, err := newCP(t, src, st, st).Restore(context.Background())
	require.ErrorIs(t, err, streaming.ErrNotFound)
	got, _ := src.snapshot()
	require.Equal(t, map[string]int64{"a": 1}, got, "a failed restore leaves the source untouched")
}

func TestCheckpointStagesEnforceOrder(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	cp := newCP(t, src, st, st)
	src.Apply("a", 1)

	info, err := cp.Snapshot(ctx, 0)
	require.NoError(t, err)

	err = cp.CommitCursor(ctx, info.ID)
	require.ErrorIs(t, err, streaming.ErrStateNotSaved)
	require.ErrorContains(t, err, `shard "sensors/p0": checkpoint 1: commit-cursor: cursor save refused`)
	_, err = st.LoadCursor(ctx, []byte("sensors/p0"))
	require.ErrorIs(t, err, streaming.ErrNotFound, "a refused cursor save writes nothing")

	err = cp.CommitCursor(ctx, info.ID+5)
	require.ErrorIs(t, err, streaming.ErrUnknownCheckpoint)
	_, err = cp.SaveState(ctx, info.ID+5)
	require.ErrorIs(t, err, streaming.ErrUnknownCheckpoint)

	si, err := cp.SaveState(ctx, info.ID)
	require.NoError(t, err)
	again, err := cp.SaveState(ctx, info.ID)
	require.NoError(t, err, "a retried save of a saved checkpoint succeeds")
	require.Equal(t, si, again)

	require.NoError(t, cp.CommitCursor(ctx, info.ID))
	require.NoError(t, cp.CommitCursor(ctx, info.ID), "a retried commit of the last checkpoint succeeds")
	require.Equal(t, 0, cp.Status().ConsecutiveFailures, "ordering refusals are not store failures")
}

func TestSnapshotSupersedesUnsavedCut(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	cp := newCP(t, src, st, st)
	src.Apply("a", 1)
	first, err := cp.Snapshot(ctx, 0)
	require.NoError(t, err)
	src.Apply("b", 2)
	second, err := cp.Snapshot(ctx, 0)
	require.NoError(t, err)
	require.Greater(t, second.ID, first.ID)

	_, err = cp.SaveState(ctx, first.ID)
	require.ErrorIs(t, err, streaming.ErrUnknownCheckpoint)
	_, err = cp.SaveState(ctx, second.ID)
	require.NoError(t, err)
	require.NoError(t, cp.CommitCursor(ctx, second.ID))

	require.Equal(t, map[string]int64{"a": 1, "b": 2}, restored(t, st), "the superseded cut's key is carried into the next one")
}

func TestCheckpointFencing(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		moveAt   string // the stage before which ownership moves
		newEpoch streaming.Epoch
		owns     bool
	}{
		{"lost before snapshot", "snapshot", 4, false},
		{"epoch bumped before save", "save", 4, true},
		{"lost before save", "save", 3, false},
		{"lost before cursor commit", "commit", 4, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newTinyStore()
			fs := faults.Wrap(st, st)
			src := newCounterSource()
			o := &owner{epoch: 3, owns: true}
			cp := newCP(t, src, fs, fs, streaming.WithOwnership(o))
			src.Apply("a", 1)

			check := func(err error) {
				t.Helper()
				require.ErrorIs(t, err, streaming.ErrFenced)
				var noe *streaming.NotOwnerError
				require.ErrorAs(t, err, &noe)
				require.Equal(t, streaming.Epoch(3), noe.Epoch)
				require.Contains(t, err.Error(), `shard "sensors/p0"`)
			}
			if tc.moveAt == "snapshot" {
				o.set(tc.newEpoch, tc.owns)
				_, err := cp.Snapshot(ctx, 3)
				check(err)
				require.Zero(t, fs.Writes())
				return
			}
			info, err := cp.Snapshot(ctx, 3)
			require.NoError(t, err)
			if tc.moveAt == "save" {
				o.set(tc.newEpoch, tc.owns)
				_, err := cp.SaveState(ctx, info.ID)
				check(err)
				require.Empty(t, st.keys(), "a fenced save writes nothing")
				return
			}
			_, err = cp.SaveState(ctx, info.ID)
			require.NoError(t, err)
			writes := fs.Writes()
			o.set(tc.newEpoch, tc.owns)
			check(cp.CommitCursor(ctx, info.ID))
			require.Equal(t, writes, fs.Writes())
			require.Zero(t, cp.Status().ConsecutiveFailures, "fencing is not a store failure")
		})
	}
}

// A zombie owner that has not yet learnt of its loss must not replace the
// manifest of the new owner.
func TestZombieManifestRefused(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	zombieSrc, newSrc := newCounterSource(), newCounterSource()
	zombie := newCP(t, zombieSrc, st, st, streaming.WithOwnership(&owner{epoch: 1, owns: true}))
	next := newCP(t, newSrc, st, st, streaming.WithOwnership(&owner{epoch: 2, owns: true}))

	zombieSrc.Apply("a", 100)
	info, err := zombie.Snapshot(ctx, 1)
	require.NoError(t, err)

	newSrc.Apply("a", 1)
	_, err = next.Checkpoint(ctx)
	require.NoError(t, err)

	_, err = zombie.SaveState(ctx, info.ID)
	require.ErrorIs(t, err, streaming.ErrFenced)

	check := newCounterSource()
	_, err = newCP(t, check, st, st).Restore(ctx)
	require.NoError(t, err)
	got, _ := check.snapshot()
	require.Equal(t, map[string]int64{"a": 1}, got)
}

func TestStageDeadlineWhileHotPathRuns(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	fs := faults.Wrap(st, st)
	src := newCounterSource()
	cp := newCP(t, src, fs, fs, streaming.WithStageTimeouts(time.Second, 100*time.Millisecond, time.Second))
	src.Apply("a", 1)
	fs.Hang(faults.OpSaveBatch)

	// The hot path keeps applying records while the save hangs.
	var applied atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				src.Apply("b", 1)
				applied.Add(1)
			}
		}
	}()
	info, err := cp.Snapshot(ctx, 0)
	require.NoError(t, err)
	before := applied.Load()
	_, err = cp.SaveState(ctx, info.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var se *streaming.StageError
	require.ErrorAs(t, err, &se)
	require.Equal(t, streaming.StageSaveState, se.Stage)
	require.Greater(t, applied.Load(), before, "records were applied while the save was hung")
	close(stop)
	<-done

	require.ErrorIs(t, cp.CommitCursor(ctx, info.ID), streaming.ErrStateNotSaved)
	require.Equal(t, 1, cp.Status().ConsecutiveFailures)

	fs.Heal()
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	want, _ := src.snapshot()
	require.Equal(t, want, restored(t, st))
}

// TestCheckpointerReportsInsteadOfBreaking: the Checkpointer once had a
// breaker of its own (5 failures / 30s) that disagreed with the checkpoint
// workflow's; now it counts storage failures and reports them, never
// refuses a checkpoint, and shows the coordinator's breaker as reported.
func TestCheckpointerReportsInsteadOfBreaking(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	fs := faults.Wrap(st, st)
	src := newCounterSource()
	cp := newCP(t, src, fs, fs)

	fail := func(op faults.Op) {
		t.Helper()
		fs.FailNext(op, 1)
		src.Apply("k", 1)
		_, err := cp.Checkpoint(ctx)
		require.ErrorIs(t, err, faults.ErrInjected)
	}
	// Failures of any stage count; none makes the next checkpoint refuse.
	for range 3 {
		fail(faults.OpSaveBatch)
		fail(faults.OpSave)
		fail(faults.OpSaveCursor)
	}
	st0 := cp.Status()
	require.Equal(t, 9, st0.ConsecutiveFailures)
	require.Equal(t, streaming.BreakerClosed, st0.Breaker, "the checkpointer does not decide")
	require.Contains(t, st0.LastError, "injected fault")
	require.False(t, src.cut != nil, "a failed checkpoint releases its cut")

	// Fencing is not a storage failure.
	_, err := cp.Snapshot(ctx, 99)
	require.ErrorIs(t, err, streaming.ErrFenced)
	require.Equal(t, 9, cp.Status().ConsecutiveFailures)

	// The coordinator's state is reported as given.
	cp.ReportBreaker(streaming.BreakerOpen)
	require.Equal(t, streaming.BreakerOpen, cp.Status().Breaker)
	cuts := src.cuts
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err, "a reported open breaker does not refuse either")
	require.Equal(t, cuts+1, src.cuts)
	st1 := cp.Status()
	require.Zero(t, st1.ConsecutiveFailures)
	require.Empty(t, st1.LastError)

	// Nothing was lost while checkpoints failed.
	want, _ := src.snapshot()
	require.Equal(t, want, restored(t, st))
}

func TestCheckpointerValidation(t *testing.T) {
	st := newTinyStore()
	src := newCounterSource()
	cases := []struct {
		name string
		opt  streaming.CheckpointerOption
		want string
	}{
		{"zero save deadline", streaming.WithStageTimeouts(time.Second, 0, time.Second), "save-state stage deadline"},
		{"zero max runs", streaming.WithMaxRuns(0), "max runs 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := streaming.NewCheckpointer("s", src, st, st, tc.opt)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := streaming.NewCheckpointer("", src, st, st)
	require.ErrorContains(t, err, "shard name")
}

// Crash between any two durable writes of a checkpoint, restore, replay
// from the restored cursor: the final state equals a run without crashes.
func TestCheckpointCrashRecovery(t *testing.T) {
	ctx := context.Background()
	const records = 500
	keyOf := func(i int) string { return fmt.Sprintf("k%d", (i*7)%13) }
	want := map[string]int64{}
	for i := range records {
		want[keyOf(i)] += int64(i)
	}
	for seed := range 30 {
		st := newTinyStore()
		fs := faults.Wrap(st, st)
		src := newCounterSource()
		cp := newCP(t, src, fs, fs, streaming.WithMaxRuns(2))
		crashes := 0
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		for i := 0; i < records; {
			src.Apply(keyOf(i), int64(i))
			i++
			if i%25 != 0 {
				continue
			}
			if crashes < 8 && rng.IntN(3) == 0 {
				fs.CrashAfter(rng.IntN(4), nil)
			}
			_, err := cp.Checkpoint(ctx)
			if fs.Crashed() {
				require.ErrorIs(t, err, faults.ErrCrashed)
				crashes++
				fs.Heal()
				src = newCounterSource()
				cp = newCP(t, src, fs, fs, streaming.WithMaxRuns(2))
				info, err := cp.Restore(ctx)
				if errors.Is(err, streaming.ErrNotFound) {
					i = 0
					continue
				}
				require.NoError(t, err)
				i = int(seqOf(info.Cursor)) // resume after the cursor
				continue
			}
			require.NoError(t, err)
		}
		got, _ := src.snapshot()
		require.Equal(t, want, got, "seed %d after %d crashes", seed, crashes)
		require.Positive(t, crashes)
	}
}

func TestRunCheckpointsPeriodically(t *testing.T) {
	st := newTinyStore()
	fs := faults.Wrap(st, st)
	src := newCounterSource()
	cp := newCP(t, src, fs, fs)
	fs.FailNext(faults.OpSaveBatch, 1) // one failed tick does not stop the loop
	for i := range 50 {
		src.Apply(fmt.Sprint("k", i%5), 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx, time.Millisecond) }()
	require.Eventually(t, func() bool { return cp.Status().LastID >= 3 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.GreaterOrEqual(t, fs.Calls(faults.OpSaveBatch), 2)
	require.Error(t, cp.Run(context.Background(), 0))
}

func TestCheckpointWithNothingChangedMovesTheCursorOnly(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	cp := checkpointedA(t, src, st, st)
	src.seq += 10 // records that changed no state (filtered, say)
	res, err := cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Pieces)
	require.Equal(t, 1, cp.Status().Runs)
	info, err := newCP(t, newCounterSource(), st, st).Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(11), seqOf(info.Cursor))
}

func TestRestoreNamesACorruptPiece(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	checkpointedA(t, src, st, st)
	piece := corruptAPiece(t, st)

	_, err := newCP(t, newCounterSource(), st, st).Restore(ctx)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.ErrorContains(t, err, piece)
}

// TestRestoreRefusesAMissingPiece: a piece the manifest names but the
// store lacks is a damaged checkpoint, refused as corrupt and named. Its
// load error wrapped ErrNotFound, which Restore's callers take for
// "nothing stored": a worker started the shard empty and its next
// checkpoint replaced the state.
func TestRestoreRefusesAMissingPiece(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	checkpointedA(t, src, st, st)
	piece := lastPiece(t, st)
	require.NoError(t, st.Delete(ctx, []byte(piece)))

	_, err := newCP(t, newCounterSource(), st, st).Restore(ctx)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.NotErrorIs(t, err, streaming.ErrNotFound, "a missing piece is not a shard with nothing stored")
	require.ErrorContains(t, err, piece)
	require.ErrorContains(t, err, "missing")
}

// lastPiece returns the key of the last piece st.keys lists.
func lastPiece(t *testing.T, st *tinyStore) string {
	t.Helper()
	var piece string
	for _, k := range st.keys() {
		if strings.Contains(k, "/piece/") {
			piece = k
		}
	}
	require.NotEmpty(t, piece, "no piece stored")
	return piece
}

// corruptAPiece overwrites the last stored piece of st with bytes of the
// size its manifest records that do not decode, and returns its key.
func corruptAPiece(t *testing.T, st *tinyStore) string {
	t.Helper()
	ctx := context.Background()
	piece := lastPiece(t, st)
	snap, err := st.Load(ctx, []byte(piece))
	require.NoError(t, err)
	snap.Data = bytes.Repeat([]byte{0xff}, len(snap.Data))
	require.NoError(t, st.Save(ctx, []byte(piece), snap))
	return piece
}

// TestMergeNamesACorruptPiece: a piece the source refuses as corrupt while
// merging runs is named in the save's error, as at a restore.
func TestMergeNamesACorruptPiece(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	cp := checkpointedA(t, src, st, st, streaming.WithMaxRuns(1))
	piece := corruptAPiece(t, st)

	src.Apply("b", 1) // a second run: the save merges both
	_, err := cp.Checkpoint(ctx)
	require.Equal(t, 1, src.merges)
	require.ErrorIs(t, err, streaming.ErrCorrupt)
	require.ErrorContains(t, err, piece)
}

// Regression (issue 14): the schema fingerprint stamped into snapshot
// metadata was never read back, so a snapshot taken by a graph archiving
// another schema was restored. Restore refuses it, naming the snapshot
// and both fingerprints, and leaves the source untouched; a snapshot
// recording no fingerprint (taken before it was stamped) still restores.
func TestRestoreRefusesOtherSchemaFingerprint(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	src.Apply("k", 1)
	_, err := newCP(t, src, st, st, streaming.WithSchemaFingerprint("pq1-aaaa")).Checkpoint(ctx)
	require.NoError(t, err)

	fresh := newCounterSource()
	fresh.Apply("other", 9)
	_, err = newCP(t, fresh, st, st, streaming.WithSchemaFingerprint("pq1-bbbb")).Restore(ctx)
	require.ErrorIs(t, err, streaming.ErrSchemaMismatch)
	var sm *streaming.SchemaMismatchError
	require.ErrorAs(t, err, &sm)
	require.Equal(t, "pq1-aaaa", sm.Stored)
	require.Equal(t, "pq1-bbbb", sm.Running)
	require.Contains(t, err.Error(), "sensors/p0/manifest")
	require.Contains(t, err.Error(), "pq1-aaaa")
	require.Contains(t, err.Error(), "pq1-bbbb")
	got, _ := fresh.snapshot()
	require.Equal(t, map[string]int64{"other": 9}, got, "a refused restore leaves the source untouched")

	// The same fingerprint, or none configured, restores.
	require.Equal(t, map[string]int64{"k": 1}, restoredWith(t, st, streaming.WithSchemaFingerprint("pq1-aaaa")))
	require.Equal(t, map[string]int64{"k": 1}, restoredWith(t, st))

	// A snapshot recording none restores under any fingerprint.
	old := newTinyStore()
	src2 := newCounterSource()
	src2.Apply("k", 2)
	_, err = newCP(t, src2, old, old).Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"k": 2}, restoredWith(t, old, streaming.WithSchemaFingerprint("pq1-bbbb")))
}

// restoredWith is restored with checkpointer options.
func restoredWith(t *testing.T, st *tinyStore, opts ...streaming.CheckpointerOption) map[string]int64 {
	t.Helper()
	fresh := newCounterSource()
	_, err := newCP(t, fresh, st, st, opts...).Restore(context.Background())
	require.NoError(t, err)
	got, _ := fresh.snapshot()
	return got
}

// TestPreCommitAndCommitHooks: the sinks' pre-commit runs after the cut
// and before any piece is written, a failing pre-commit fails the save
// (nothing is committed), and the commit notification follows the cursor
// save.
func TestPreCommitAndCommitHooks(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	src := newCounterSource()
	var events []string
	fail := true
	cp := newCP(t, src, st, st,
		streaming.WithPreCommit(func(_ context.Context, id streaming.CheckpointID) error {
			events = append(events, fmt.Sprintf("pre-commit %d (%d keys stored)", id, len(st.keys())))
			if fail {
				return errors.New("sink down")
			}
			return nil
		}),
		streaming.WithOnCommit(func(_ context.Context, id streaming.CheckpointID) {
			rec, err := st.LoadCursor(ctx, []byte("sensors/p0"))
			require.NoError(t, err)
			events = append(events, fmt.Sprintf("commit %d (cursor of checkpoint %d saved)", id, rec.CheckpointID))
		}))
	src.Apply("k", 1)
	info, err := cp.Snapshot(ctx, 0)
	require.NoError(t, err)
	_, err = cp.SaveState(ctx, info.ID)
	require.ErrorContains(t, err, "sink down")
	require.Empty(t, st.keys(), "a failed pre-commit writes no state")
	fail = false
	_, err = cp.SaveState(ctx, info.ID)
	require.NoError(t, err)
	require.NoError(t, cp.CommitCursor(ctx, info.ID))
	require.Equal(t, []string{"pre-commit 1 (0 keys stored)", "pre-commit 1 (0 keys stored)", "commit 1 (cursor of checkpoint 1 saved)"}, events)
}

// landsButFails is a store whose next manifest Save lands and then
// reports an error (a timeout after the write), and whose next SaveBatch
// fails writing nothing.
type landsButFails struct {
	*tinyStore
	manifestLands atomic.Bool
	batchFails    atomic.Bool
}

func (s *landsButFails) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	if strings.HasSuffix(string(key), "/manifest") && s.manifestLands.CompareAndSwap(true, false) {
		if err := s.tinyStore.Save(ctx, key, snap); err != nil {
			return err
		}
		return fmt.Errorf("manifest %q: %w", key, context.DeadlineExceeded)
	}
	return s.tinyStore.Save(ctx, key, snap)
}

func (s *landsButFails) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if s.batchFails.CompareAndSwap(true, false) {
		return fmt.Errorf("save batch: %w", faults.ErrInjected)
	}
	return streaming.SaveBatchSequential(ctx, s, items)
}

// A retried SaveState whose first attempt's manifest landed (its Save
// reported a timeout after the write) and whose retry then failed
// writing pieces deleted the pieces of its checkpoint as unreferenced:
// they were the landed manifest's, so a restart could not restore. The
// pieces of a checkpoint whose manifest may have landed are kept.
func TestRetriedSaveStateKeepsThePiecesOfAManifestThatMayHaveLanded(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	fs := &landsButFails{tinyStore: st}
	src := newCounterSource()
	cp := newCP(t, src, fs, fs)
	for i := range 10 {
		src.Apply(fmt.Sprintf("k%d", i), int64(i+1))
	}
	want, _ := src.snapshot()
	info, err := cp.Snapshot(ctx, 0)
	require.NoError(t, err)

	fs.manifestLands.Store(true)
	_, err = cp.SaveState(ctx, info.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, want, restored(t, st), "the first attempt's manifest landed")

	fs.batchFails.Store(true)
	_, err = cp.SaveState(ctx, info.ID)
	require.ErrorIs(t, err, faults.ErrInjected)
	// The process dies here: the stored manifest must still restore.
	require.Equal(t, want, restored(t, st), "the retry deleted pieces the landed manifest names")

	_, err = cp.SaveState(ctx, info.ID)
	require.NoError(t, err)
	require.NoError(t, cp.CommitCursor(ctx, info.ID))
	require.Equal(t, want, restored(t, st))
}

// hangingDeletes is a store whose DeleteKeys hangs until its context ends
// (a store that stopped answering), or the test ends.
type hangingDeletes struct {
	*tinyStore
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *hangingDeletes) DeleteKeys(ctx context.Context, keys [][]byte) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.release:
		return errors.New("test over")
	}
}

// The pieces a merge replaced were deleted under a context of their own
// (context.Background with the commit-cursor deadline), so a caller that
// gave up — a worker shutting down — waited for that deadline against a
// store that stopped answering, the shard's stage lock held. The deletes
// now end with the caller's context.
func TestDroppingPiecesEndsWithTheCallersContext(t *testing.T) {
	st := &hangingDeletes{tinyStore: newTinyStore(), entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(st.release) })
	src := newCounterSource()
	cp := checkpointedA(t, src, st, st, streaming.WithMaxRuns(1), streaming.WithStageTimeouts(5*time.Second, time.Minute, time.Hour))

	// The second run makes two: the merge replaces them, and drops the
	// first one's piece.
	src.Apply("b", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cp.Checkpoint(ctx)
		done <- err
	}()
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the merge dropped no pieces")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Checkpoint still deleting pieces 10s after its caller gave up")
	}
}

// Pieces of a checkpoint whose manifest never landed (a crash between
// the pieces and the manifest) were never deleted: nothing named them,
// and nothing looked for them. The first checkpoint committed after a
// restore now deletes the shard's pieces its manifest does not name,
// those of its own epoch up to its checkpoint and of older epochs; a
// newer owner's pieces, not yet named by its manifest, stay.
func TestCheckpointAfterARestoreSweepsOrphanedPieces(t *testing.T) {
	st := newTinyStore()
	sweepOrphanedPieces(t, st, st)
}

// shardListingStore is a tinyStore that lists one shard's keys
// (streaming.ShardKeyLister) and counts both listings.
type shardListingStore struct {
	*tinyStore
	all    atomic.Int64
	shards []string
}

func (s *shardListingStore) ListKeys(ctx context.Context) ([][]byte, error) {
	s.all.Add(1)
	return s.tinyStore.ListKeys(ctx)
}

func (s *shardListingStore) ListShardKeys(ctx context.Context, shard string) ([][]byte, error) {
	s.mu.Lock()
	s.shards = append(s.shards, shard)
	s.mu.Unlock()
	keys, err := s.tinyStore.ListKeys(ctx)
	return slices.DeleteFunc(keys, func(k []byte) bool {
		sh, ok := streaming.CheckpointKeyShard(k)
		return !ok || sh != shard
	}), err
}

// TestOrphanSweepListsOnlyItsShard: the sweep after a restore asks a
// store that can list one shard's keys for those, not for every key: on
// S3 ListKeys lists every shard's folder, once for each shard restored.
// Before: the sweep always called ListKeys.
func TestOrphanSweepListsOnlyItsShard(t *testing.T) {
	st := &shardListingStore{tinyStore: newTinyStore()}
	sweepOrphanedPieces(t, st.tinyStore, st)
	require.Zero(t, st.all.Load(), "the sweep listed every key")
	require.NotEmpty(t, st.shards)
	for _, sh := range st.shards {
		require.Equal(t, "sensors/p0", sh)
	}
}

// sweepOrphanedPieces is TestCheckpointAfterARestoreSweepsOrphanedPieces
// on state, a StateStore over st (also the cursor store).
func sweepOrphanedPieces(t *testing.T, st *tinyStore, state streaming.StateStore) {
	ctx := context.Background()
	own := &owner{epoch: 3, owns: true}
	src := newCounterSource()
	checkpointedA(t, src, state, st, streaming.WithOwnership(own))
	named := st.keys()

	// The crash: checkpoint 2's pieces were written, its manifest was not.
	piece := streaming.Snapshot{Meta: streaming.SnapshotMeta{FormatVersion: streaming.SnapshotFormatVersion}, Data: []byte("orphan")}
	orphans := []string{
		streaming.CheckpointPieceKey("sensors/p0", 3, 2, 0),
		streaming.CheckpointPieceKey("sensors/p0", 3, 2, 7),
		streaming.CheckpointPieceKey("sensors/p0", 1, 9, 0),
	}
	newer := streaming.CheckpointPieceKey("sensors/p0", 8, 2, 0) // a newer owner's, in flight
	other := streaming.CheckpointPieceKey("sensors/p1", 1, 1, 0) // another shard's
	for _, k := range append(orphans, newer, other) {
		require.NoError(t, st.Save(ctx, []byte(k), piece))
	}

	own.set(5, true)
	src2 := newCounterSource()
	cp2 := newCP(t, src2, state, st, streaming.WithOwnership(own))
	_, err := cp2.Restore(ctx)
	require.NoError(t, err)
	src2.Apply("b", 1)
	_, err = cp2.Checkpoint(ctx)
	require.NoError(t, err)
	for _, k := range orphans {
		require.NotContains(t, st.keys(), k, "an orphaned piece is left")
	}
	require.Contains(t, st.keys(), newer)
	require.Contains(t, st.keys(), other)
	for _, k := range named {
		require.Contains(t, st.keys(), k, "a piece the manifest names was deleted")
	}
	require.Equal(t, map[string]int64{"a": 1, "b": 1}, restored(t, st))
}

// TestCancelledCheckpointIsNotAFailureToWarnOf: a checkpoint in flight
// when its caller gives up (a worker stopping, whose final checkpoint
// follows) logged "checkpoint stage failed" as a warning, at nearly
// every demo stop, and counted as a store failure. It is logged as
// cancelled, at info, and not counted against the stores; a store that
// fails still warns.
func TestCancelledCheckpointIsNotAFailureToWarnOf(t *testing.T) {
	st := newTinyStore()
	fs := faults.Wrap(st, st)
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	logged := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	src := newCounterSource()
	cp := newCP(t, src, fs, fs, streaming.WithCheckpointLogger(log))
	src.Apply("a", 1)

	fs.Hang(faults.OpLoad, faults.OpSave, faults.OpSaveBatch)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := cp.Checkpoint(ctx); done <- err }()
	require.Eventually(t, func() bool {
		return fs.Calls(faults.OpLoad)+fs.Calls(faults.OpSave)+fs.Calls(faults.OpSaveBatch) > 0
	}, 10*time.Second, time.Millisecond, "the checkpoint reached the store")
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled checkpoint did not return")
	}
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, logged(), `level=INFO msg="checkpoint cancelled"`)
	require.NotContains(t, logged(), "checkpoint stage failed")
	require.Zero(t, cp.Status().ConsecutiveFailures, "a cancel says nothing of the stores")

	fs.Heal()
	fs.FailNext(faults.OpSaveBatch, 1)
	fs.FailNext(faults.OpSave, 1)
	src.Apply("b", 2)
	_, err = cp.Checkpoint(context.Background())
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Contains(t, logged(), `level=WARN msg="checkpoint stage failed"`)
	require.Equal(t, 1, cp.Status().ConsecutiveFailures)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
