package streaming_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/faults"
)

type groupShard struct {
	src *counterSource
	own *owner
	cp  *streaming.Checkpointer
}

// newGroup makes n shards over one store, owned at epoch 2.
func newGroup(t *testing.T, st streaming.StateStore, cs streaming.CursorStore, n int, opts ...streaming.CheckpointerOption) []groupShard {
	t.Helper()
	out := make([]groupShard, n)
	for i := range out {
		src := newCounterSource()
		own := &owner{}
		own.set(2, true)
		cp, err := streaming.NewCheckpointer(fmt.Sprintf("signals/%d", i), src, st, cs, append([]streaming.CheckpointerOption{streaming.WithOwnership(own)}, opts...)...)
		require.NoError(t, err)
		out[i] = groupShard{src, own, cp}
	}
	return out
}

func members(g []groupShard) []streaming.GroupMember {
	out := make([]streaming.GroupMember, len(g))
	for i, s := range g {
		out[i] = streaming.GroupMember{Checkpointer: s.cp, Epoch: 2}
	}
	return out
}

func restoredShard(t *testing.T, st *tinyStore, shard string) map[string]int64 {
	t.Helper()
	fresh := newCounterSource()
	cp, err := streaming.NewCheckpointer(shard, fresh, st, st)
	require.NoError(t, err)
	_, err = cp.Restore(context.Background())
	require.NoError(t, err)
	got, _ := fresh.snapshot()
	return got
}

// TestCheckpointGroupSharesWrites: shards on one store share the SaveBatch
// calls of their pieces and of their manifests, and each restores its own
// state.
func TestCheckpointGroupSharesWrites(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	fs := faults.Wrap(st, st)
	g := newGroup(t, fs, fs, 16)
	for i, s := range g {
		for k := range 10 {
			s.src.Apply(fmt.Sprintf("k%d", k), int64(i*100+k))
		}
	}
	out := streaming.CheckpointGroup(ctx, members(g))
	for i, o := range out {
		require.NoError(t, o.Err, "shard %d", i)
		require.Equal(t, streaming.CheckpointID(1), o.Result.ID)
		require.Equal(t, 3, o.Result.Pieces, "10 keys in pieces of 4")
		require.Positive(t, o.Result.Bytes)
	}
	require.Equal(t, 2, fs.Calls(faults.OpSaveBatch), "one batch of pieces and one of manifests for 16 shards")
	require.Zero(t, fs.Calls(faults.OpSave))
	require.Equal(t, 16, fs.Calls(faults.OpSaveCursor))
	for _, s := range g {
		want, _ := s.src.snapshot()
		require.Equal(t, want, restoredShard(t, st, s.cp.Shard()))
	}
}

// TestCheckpointGroupFailsShardsOnTheirOwn: a shard the worker no longer
// owns is refused alone; a failed shared write fails the shards in it,
// and the next group commits everything they held.
func TestCheckpointGroupFailsShardsOnTheirOwn(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	fs := faults.Wrap(st, st)
	g := newGroup(t, fs, fs, 4)
	for _, s := range g {
		s.src.Apply("a", 1)
	}
	g[1].own.set(3, true) // shard 1 moved on to a newer epoch
	out := streaming.CheckpointGroup(ctx, members(g))
	require.ErrorIs(t, out[1].Err, streaming.ErrFenced)
	for _, i := range []int{0, 2, 3} {
		require.NoError(t, out[i].Err)
	}
	require.Zero(t, g[1].cp.Status().ConsecutiveFailures, "fencing is not a storage failure")

	for _, s := range g {
		s.src.Apply("b", 2)
	}
	fs.FailNext(faults.OpSaveBatch, 1)
	out = streaming.CheckpointGroup(ctx, members(g[:1]))
	require.ErrorIs(t, out[0].Err, faults.ErrInjected)
	var se *streaming.StageError
	require.ErrorAs(t, out[0].Err, &se)
	require.Equal(t, streaming.StageSaveState, se.Stage)
	require.Equal(t, 1, g[0].cp.Status().ConsecutiveFailures)

	out = streaming.CheckpointGroup(ctx, append(members(g[:1]), members(g[2:])...))
	for i, o := range out {
		require.NoError(t, o.Err, "member %d", i)
	}
	for _, i := range []int{0, 2, 3} {
		want, _ := g[i].src.snapshot()
		require.Equal(t, want, restoredShard(t, st, g[i].cp.Shard()), "shard %d", i)
	}
}

func TestCheckpointGroupRefusesTheSameShardTwice(t *testing.T) {
	st := newTinyStore()
	g := newGroup(t, st, st, 1)
	out := streaming.CheckpointGroup(context.Background(), []streaming.GroupMember{{Checkpointer: g[0].cp, Epoch: 2}, {Checkpointer: g[0].cp, Epoch: 2}})
	require.NoError(t, out[0].Err)
	require.ErrorContains(t, out[1].Err, `shard "signals/0" appears twice`)
}

// TestCheckpointGroupRefusesOneShardTwiceOnOneStore: two Checkpointers of
// one shard on one store would write one manifest key in one batch, the
// second replacing the first while both reported a commit; the second is
// refused and the first's state is what restores.
func TestCheckpointGroupRefusesOneShardTwiceOnOneStore(t *testing.T) {
	st := newTinyStore()
	a, b := newGroup(t, st, st, 1), newGroup(t, st, st, 1)
	a[0].src.Apply("a", 1)
	b[0].src.Apply("b", 2)
	out := streaming.CheckpointGroup(context.Background(), append(members(a), members(b)...))
	require.NoError(t, out[0].Err)
	require.ErrorContains(t, out[1].Err, `shard "signals/0" appears twice`)
	want, _ := a[0].src.snapshot()
	require.Equal(t, want, restoredShard(t, st, "signals/0"))
}

// TestCheckpointGroupMergesRuns: a shard that needs its runs merged in a
// group reads back its new run, which must already be written.
func TestCheckpointGroupMergesRuns(t *testing.T) {
	ctx := context.Background()
	st := newTinyStore()
	g := newGroup(t, st, st, 3, streaming.WithMaxRuns(2), streaming.WithSaveBatchBytes(1<<20))
	for round := range 5 {
		for _, s := range g {
			s.src.Apply(fmt.Sprintf("k%d", round), int64(round))
		}
		for i, o := range streaming.CheckpointGroup(ctx, members(g)) {
			require.NoError(t, o.Err, "round %d member %d", round, i)
		}
	}
	for _, s := range g {
		require.LessOrEqual(t, s.cp.Status().Runs, 2)
		require.Positive(t, s.src.merges)
		want, _ := s.src.snapshot()
		require.Equal(t, want, restoredShard(t, st, s.cp.Shard()))
	}
}

// TestCheckpointGroupsOfOneShardNameDoNotDeadlock: Checkpointers of one
// shard name (each on its own store) in two groups listed in opposite
// orders must not take their locks in opposite orders.
func TestCheckpointGroupsOfOneShardNameDoNotDeadlock(t *testing.T) {
	ctx := context.Background()
	var fwd []streaming.GroupMember
	for range 16 {
		st := newTinyStore()
		fwd = append(fwd, members(newGroup(t, st, st, 1))...)
	}
	rev := slices.Clone(fwd)
	slices.Reverse(rev)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			var wg sync.WaitGroup
			for _, m := range [][]streaming.GroupMember{fwd, rev} {
				wg.Go(func() { streaming.CheckpointGroup(ctx, m) })
			}
			wg.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("two checkpoint groups deadlocked on Checkpointers of one shard name")
	}
}

// valueStore is a StateStore of a comparable struct type whose interface
// field holds a value that is not comparable (a map): comparing two of
// them panics at run time although their type is comparable.
type valueStore struct {
	streaming.StateStore
	tags any
}

// TestCheckpointGroupOfAValueTypeStore: the group compared stores with ==
// when their type was comparable, which panics for a struct store whose
// interface field holds a map; such stores each get a group of their
// own, and the checkpoint completes.
func TestCheckpointGroupOfAValueTypeStore(t *testing.T) {
	st := newTinyStore()
	vs := valueStore{StateStore: st, tags: map[string]string{"team": "plant"}}
	g := newGroup(t, vs, st, 2)
	for i, s := range g {
		s.src.Apply("k", int64(i))
	}
	var out []streaming.GroupOutcome
	require.NotPanics(t, func() { out = streaming.CheckpointGroup(context.Background(), members(g)) })
	for i, o := range out {
		require.NoError(t, o.Err, "shard %d", i)
	}
	require.Equal(t, map[string]int64{"k": 1}, restoredShard(t, st, "signals/1"))
}
