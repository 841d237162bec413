package streaming_test

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

func sumGraph(t testing.TB, factory func() streaming.Operator) *streaming.Graph {
	t.Helper()
	g, err := streaming.NewBuilder().Input("x").
		Node("total", factory, "x").
		Node("count", newCounter, "x").
		Node("pos", newPos, "x").
		Output("total", "count").
		Build()
	require.NoError(t, err)
	return g
}

func TestInstanceSaveLoadContinues(t *testing.T) {
	g := sumGraph(t, newSum)
	whole := g.NewInstance()
	first := g.NewInstance()
	for i := range 50 {
		v := streaming.Float(float64(i%7) - 2)
		whole.Eval(int64(i), v)
		if i < 20 {
			first.Eval(int64(i), v)
		}
	}
	blob, err := first.Save()
	require.NoError(t, err)
	require.NotEmpty(t, blob)

	restored := g.NewInstance()
	require.NoError(t, restored.Load(blob))
	for i := 20; i < 50; i++ {
		restored.Eval(int64(i), streaming.Float(float64(i%7)-2))
	}
	assert.Equal(t, whole.Output(0), restored.Output(0))
	assert.Equal(t, whole.Output(1), restored.Output(1))
}

func TestInstanceSaveSkipsStatelessAndEmpty(t *testing.T) {
	g, err := streaming.NewBuilder().Input("a", "b").Node("both", newAdd, "a", "b").Build()
	require.NoError(t, err)
	blob, err := g.NewInstance().Save()
	require.NoError(t, err)
	assert.Nil(t, blob, "a graph with no stateful operator saves nothing")
	in := g.NewInstance()
	require.NoError(t, in.Load(nil))
}

func TestLoadNewNodeStartsFresh(t *testing.T) {
	old, err := streaming.NewBuilder().Input("x").Node("total", newSum, "x").Build()
	require.NoError(t, err)
	in := old.NewInstance()
	in.Eval(1, streaming.Float(5))
	blob, err := in.Save()
	require.NoError(t, err)

	grown := sumGraph(t, newSum) // adds "count"
	in2 := grown.NewInstance()
	in2.Eval(0, streaming.Float(100)) // state that Load must reset
	require.NoError(t, in2.Load(blob))
	in2.Eval(2, streaming.Float(1))
	assert.Equal(t, 6.0, in2.Output(0).Float64())
	assert.Equal(t, int64(1), in2.Output(1).Int64(), "a node absent from the blob starts fresh")
}

func TestLoadRefusals(t *testing.T) {
	g := sumGraph(t, newSum)
	in := g.NewInstance()
	in.Eval(1, streaming.Float(3))
	blob, err := in.Save()
	require.NoError(t, err)

	t.Run("node removed", func(t *testing.T) {
		shrunk, err := streaming.NewBuilder().Input("x").Node("count", newCounter, "x").Build()
		require.NoError(t, err)
		err = shrunk.NewInstance().Load(blob)
		var le *streaming.OperatorLoadError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "total", le.Node)
		assert.Contains(t, err.Error(), "no longer has")
	})
	t.Run("operator type changed", func(t *testing.T) {
		changed, err := streaming.NewBuilder().Input("x").
			Node("total", newCounter, "x").Node("count", newCounter, "x").Build()
		require.NoError(t, err)
		err = changed.NewInstance().Load(blob)
		var le *streaming.OperatorLoadError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "total", le.Node)
		assert.Contains(t, err.Error(), `saved by operator "sum"`)
	})
	t.Run("newer version without migrator", func(t *testing.T) {
		v3 := sumGraph(t, func() streaming.Operator { return &sum{ver: 3} })
		err := v3.NewInstance().Load(blob)
		var ve *streaming.VersionError
		require.ErrorAs(t, err, &ve)
		assert.Equal(t, uint32(1), ve.Saved)
		assert.Equal(t, []uint32{3}, ve.Accepted)
		assert.Equal(t, `load state of operator "sum" (node "total"): saved at type version 1, operator accepts 3`, err.Error())
	})
	t.Run("operator refuses blob", func(t *testing.T) {
		// Hand-build a blob whose sum entry has 3 bytes instead of 8.
		bad := []byte{1, 0x81, 0x80, 0x80, 0x80, 0}
		bad = append(bad, 5, 't', 'o', 't', 'a', 'l', 3, 's', 'u', 'm', 1, 3, 1, 2, 3)
		err := g.NewInstance().Load(bad)
		var le *streaming.OperatorLoadError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "total", le.Node)
		assert.Contains(t, err.Error(), "want 8 bytes")
	})
	t.Run("type version beyond uint32", func(t *testing.T) {
		// The sum entry of blob with type version 2^32+1, which a
		// truncation to uint32 read as the operator's own version 1.
		bad := []byte{1, 0x81, 0x80, 0x80, 0x80, 0}
		bad = append(bad, 5, 't', 'o', 't', 'a', 'l', 3, 's', 'u', 'm')
		bad = binary.AppendUvarint(bad, 1<<32+1)
		bad = append(bad, 8, 0, 0, 0, 0, 0, 0, 0, 0)
		err := g.NewInstance().Load(bad)
		require.ErrorIs(t, err, streaming.ErrCorrupt)
		assert.Contains(t, err.Error(), "type version 4294967297")
	})
	t.Run("truncated", func(t *testing.T) {
		for n := 1; n < len(blob); n++ {
			err := g.NewInstance().Load(blob[:n])
			require.Error(t, err, "prefix of %d bytes", n)
			assert.True(t, errors.Is(err, streaming.ErrCorrupt), "prefix %d: %v", n, err)
		}
	})
	t.Run("trailing bytes", func(t *testing.T) {
		err := g.NewInstance().Load(append(append([]byte{}, blob...), 0))
		assert.ErrorIs(t, err, streaming.ErrCorrupt)
	})
	t.Run("unknown format version", func(t *testing.T) {
		err := g.NewInstance().Load(append([]byte{9}, blob[1:]...))
		assert.ErrorIs(t, err, streaming.ErrCorrupt)
		assert.Contains(t, err.Error(), "format version 9")
	})
}

func TestLoadMigratesOlderVersion(t *testing.T) {
	// A v1 "sum" stored hundredths as an int64; v2 migrates it.
	v1 := &sum{ver: 1}
	v1.total = 0
	g1 := sumGraph(t, func() streaming.Operator { return &centsSum{} })
	in := g1.NewInstance()
	in.Eval(1, streaming.Float(2.5))
	in.Eval(2, streaming.Float(1.25))
	blob, err := in.Save()
	require.NoError(t, err)

	g2 := sumGraph(t, func() streaming.Operator { return &migratingSum{sum: sum{ver: 2}} })
	in2 := g2.NewInstance()
	require.NoError(t, in2.Load(blob))
	in2.Eval(3, streaming.Float(1))
	assert.Equal(t, 4.75, in2.Output(0).Float64())

	// A version the migrator does not list is refused, naming what it accepts.
	g0 := sumGraph(t, func() streaming.Operator { return &sum{ver: 7} })
	in0 := g0.NewInstance()
	in0.Eval(1, streaming.Float(1))
	blob7, err := in0.Save()
	require.NoError(t, err)
	err = g2.NewInstance().Load(blob7)
	var ve *streaming.VersionError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, []uint32{2, 1}, ve.Accepted)
}

// centsSum is the v1 format migratingSum reads: the total in hundredths.
type centsSum struct{ sum }

func (c *centsSum) TypeVersion() uint32 { return 1 }
func (c *centsSum) Save() ([]byte, error) {
	b := make([]byte, 8)
	v := uint64(int64(c.total * 100))
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
	return b, nil
}

func TestBaseDefaults(t *testing.T) {
	var b streaming.Base
	assert.Equal(t, "operator", b.Name())
	assert.Equal(t, uint32(0), b.TypeVersion())
	data, err := b.Save()
	assert.NoError(t, err)
	assert.Nil(t, data)
	assert.NoError(t, b.Load(nil))
	var le *streaming.OperatorLoadError
	assert.ErrorAs(t, b.Load([]byte{1}), &le, "an operator without state refuses a non-empty blob")
}

func FuzzInstanceLoad(f *testing.F) {
	g := sumGraph(f, newSum)
	in := g.NewInstance()
	in.Eval(1, streaming.Float(3))
	blob, _ := in.Save()
	f.Add(blob)
	f.Add([]byte{})
	f.Add([]byte{1, 0x80, 0x80, 0x80, 0x80, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		inst := g.NewInstance()
		if err := inst.Load(data); err != nil {
			return
		}
		// Whatever loads must save and load again to the same outputs.
		inst.Eval(2, streaming.Float(1))
		out, err := inst.Save()
		if err != nil {
			t.Fatal(err)
		}
		again := g.NewInstance()
		if err := again.Load(out); err != nil {
			t.Fatalf("reload of own save failed: %v", err)
		}
	})
}

// TestCheckRestore: a snapshot's recorded nodes are checked against the
// graph that restores it, once, with the errors Load would return key by
// key: a node removed, running another operator, or at a type version
// neither current nor migrated from is refused, each named; nodes added
// or stateless, and versions a Migrator accepts, pass.
func TestCheckRestore(t *testing.T) {
	saved := []streaming.OperatorInfo{{Node: "total", Operator: "sum", TypeVersion: 1}, {Node: "count", Operator: "counter", TypeVersion: 0}}
	require.NoError(t, sumGraph(t, newSum).CheckRestore(saved), "the same graph")
	require.NoError(t, sumGraph(t, newSum).CheckRestore(append(slices.Clone(saved), streaming.OperatorInfo{Node: "pos", Operator: "other", TypeVersion: 9})),
		"a node that keeps no state is not checked")
	require.NoError(t, sumGraph(t, newSum).CheckRestore(saved[:1]), "a node added since starts empty")
	require.NoError(t, sumGraph(t, func() streaming.Operator { return &migratingSum{sum: sum{ver: 2}} }).CheckRestore(saved), "migrated from 1")

	err := sumGraph(t, func() streaming.Operator { return &sum{ver: 3} }).CheckRestore(saved)
	var ve *streaming.VersionError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, `load state of operator "sum" (node "total"): saved at type version 1, operator accepts 3`, err.Error())

	shrunk, err := streaming.NewBuilder().Input("x").Node("count", newSum, "x").Build()
	require.NoError(t, err)
	err = shrunk.CheckRestore(saved)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `load state of operator "sum" (node "total"): saved state belongs to a node the graph no longer has`)
	assert.Contains(t, err.Error(), `load state of operator "sum" (node "count"): state was saved by operator "counter"`, "every node refused, not only the first")
}

// TestCheckRestoreDropping: with allow non-restored state a saved node the
// graph no longer has is dropped instead of refused, and the nodes to drop
// from now on are those dropped before and now, sorted; a node that still
// exists but runs another operator or is at a version it cannot migrate
// from stays refused, and a node named as a dropped one is refused, with
// the option or without.
func TestCheckRestoreDropping(t *testing.T) {
	saved := []streaming.OperatorInfo{{Node: "total", Operator: "sum", TypeVersion: 1}, {Node: "count", Operator: "sum", TypeVersion: 1}}
	shrunk, err := streaming.NewBuilder().Input("x").Node("count", newSum, "x").Build()
	require.NoError(t, err)

	dropped, err := shrunk.CheckRestoreDropping(saved, nil, true)
	require.NoError(t, err)
	assert.Equal(t, []string{"total"}, dropped)
	dropped, err = shrunk.CheckRestoreDropping(saved[1:], []string{"zeta", "old"}, false)
	require.NoError(t, err, "nodes dropped before need no option")
	assert.Equal(t, []string{"old", "zeta"}, dropped)
	dropped, err = shrunk.CheckRestoreDropping(saved, []string{"zeta"}, true)
	require.NoError(t, err)
	assert.Equal(t, []string{"total", "zeta"}, dropped)
	dropped, err = shrunk.CheckRestoreDropping(saved[1:], nil, true)
	require.NoError(t, err)
	assert.Nil(t, dropped, "nothing to drop")

	_, err = shrunk.CheckRestoreDropping(saved, nil, false)
	assert.ErrorContains(t, err, `(node "total"): saved state belongs to a node the graph no longer has`)

	other, err := streaming.NewBuilder().Input("x").Node("count", func() streaming.Operator { return &sum{ver: 3} }, "x").Build()
	require.NoError(t, err)
	_, err = other.CheckRestoreDropping(saved, nil, true)
	var ve *streaming.VersionError
	require.ErrorAs(t, err, &ve, "a version mismatch of a node that exists stays refused")
	assert.Equal(t, "count", ve.Node)

	_, err = shrunk.CheckRestoreDropping(saved[:1], []string{"count"}, true)
	assert.EqualError(t, err, `load state of operator "sum" (node "count"): an earlier restore dropped the saved state of a node of this name (allow non-restored state), and keys not written since may still hold it: give the node another name (or restore from an empty durable store)`)
}

// TestLoadDroppingSkipsDroppedNodes: the entries of dropped nodes in a
// key's state are skipped, whether the graph has such a node or not, and
// the other nodes load; Load refuses the entry of a node the graph lacks.
func TestLoadDroppingSkipsDroppedNodes(t *testing.T) {
	g := sumGraph(t, newSum)
	in := g.NewInstance()
	in.Eval(1, streaming.Float(2))
	in.Eval(2, streaming.Float(3))
	blob, err := in.Save()
	require.NoError(t, err)
	shrunk, err := streaming.NewBuilder().Input("x").Node("count", newCounter, "x").Build()
	require.NoError(t, err)

	require.ErrorContains(t, shrunk.NewInstance().Load(blob), "no longer has")
	got := shrunk.NewInstance()
	require.NoError(t, got.LoadDropping(blob, []string{"total"}))
	want, err := in.Operator("count").Save()
	require.NoError(t, err)
	have, err := got.Operator("count").Save()
	require.NoError(t, err)
	assert.Equal(t, want, have)

	again := g.NewInstance()
	require.NoError(t, again.LoadDropping(blob, []string{"total"}))
	fresh, err := g.NewInstance().Operator("total").Save()
	require.NoError(t, err)
	have, err = again.Operator("total").Save()
	require.NoError(t, err)
	assert.Equal(t, fresh, have, "a dropped node of the graph starts fresh")
}
