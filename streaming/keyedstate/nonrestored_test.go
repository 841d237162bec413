package keyedstate_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// TestRestoreDropsARemovedNodeWhenAllowed: a checkpoint whose graph had a
// stateful node the new graph no longer has was refused at restore, and
// the only way out was an empty store, losing every node's state. With
// allow non-restored state the node is dropped with a warning naming it
// and every other node restores, on every key: those the new graph writes
// and those only loaded later from Badger, whose stored state still holds
// the dropped node's bytes. The dropped name stays in every later
// checkpoint, so a restore without the option still skips those bytes,
// and a graph that adds a node of that name again is refused.
func TestRestoreDropsARemovedNodeWhenAllowed(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	full := smaGraph(t) // smooth, then trend
	shrunk, err := streaming.NewBuilder().Input("value").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(5) }, "value").Build()
	require.NoError(t, err)

	const keys = 20
	key := func(i int) string { return fmt.Sprintf("sensor/%02d", i) }
	// ref holds each key's smooth state as the shrunk graph computes it.
	ref := make([]*streaming.Instance, keys)
	for i := range ref {
		ref[i] = shrunk.NewInstance()
	}
	seq := 0
	apply := func(rt *keyedstate.Runtime[string], i int) {
		t.Helper()
		seq++
		v := streaming.Float(float64(seq % 17))
		inst, err := rt.Apply(key(i), int64(seq), "seq", seqCursor(seq), v)
		require.NoError(t, err)
		ref[i].Eval(int64(seq), v)
		got, err := inst.Operator("smooth").Save()
		require.NoError(t, err)
		want, err := ref[i].Operator("smooth").Save()
		require.NoError(t, err)
		require.Equal(t, want, got, "key %s: smooth state", key(i))
	}
	droppedOf := func() []string {
		t.Helper()
		m, err := store.Load(ctx, []byte("shard-0/manifest"))
		require.NoError(t, err)
		return m.Meta.DroppedNodes
	}

	rt := newRuntime(t, full, openDB(t))
	cp, err := streaming.NewCheckpointer("shard-0", rt, store, store, streaming.WithGraph(full))
	require.NoError(t, err)
	for range 3 {
		for i := range keys {
			apply(rt, i)
		}
	}
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Nil(t, droppedOf())

	// Without the option the removed node is refused, as before.
	rt = newRuntime(t, shrunk, openDB(t))
	cp, err = streaming.NewCheckpointer("shard-0", rt, store, store, streaming.WithGraph(shrunk))
	require.NoError(t, err)
	_, err = cp.Restore(ctx)
	require.ErrorContains(t, err, `node "trend"): saved state belongs to a node the graph no longer has`)

	// With it, trend is dropped with a warning; half the keys are written.
	var logs bytes.Buffer
	rt = newRuntime(t, shrunk, openDB(t), small(4)...) // most keys evicted to Badger
	cp, err = streaming.NewCheckpointer("shard-0", rt, store, store, streaming.WithGraph(shrunk),
		streaming.WithNonRestoredState(true), streaming.WithCheckpointLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	_, err = cp.Restore(ctx)
	require.NoError(t, err)
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "nodes=[trend]")
	for i := range keys / 2 {
		apply(rt, i)
	}
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"trend"}, droppedOf())
	require.Zero(t, rt.Stats().Quarantined)

	// A later restore without the option knows trend was dropped: the
	// keys not written since (their stored state still holds trend's)
	// load their smooth state, and the name survives further checkpoints.
	rt = newRuntime(t, shrunk, openDB(t), small(4)...)
	cp, err = streaming.NewCheckpointer("shard-0", rt, store, store, streaming.WithGraph(shrunk))
	require.NoError(t, err)
	_, err = cp.Restore(ctx)
	require.NoError(t, err)
	for i := range keys {
		apply(rt, i)
	}
	require.Zero(t, rt.Stats().Quarantined, "no key's state refused")
	_, err = cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"trend"}, droppedOf())

	// Adding trend again would load its stale state on some keys: refused,
	// with or without the option.
	for _, allow := range []bool{false, true} {
		rt = newRuntime(t, full, openDB(t))
		cp, err = streaming.NewCheckpointer("shard-0", rt, store, store, streaming.WithGraph(full), streaming.WithNonRestoredState(allow))
		require.NoError(t, err)
		_, err = cp.Restore(ctx)
		require.ErrorContains(t, err, `node "trend"): an earlier restore dropped the saved state of a node of this name`)
		require.ErrorContains(t, err, "give the node another name")
	}
}
