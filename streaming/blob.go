package streaming

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tflo-io/tflo/internal/wire"
)

// instanceBlobVersion is the format version of an Instance state blob.
//
// Format (all integers unsigned varints):
//
//	version | entry count | entries...
//	entry = len(node) node | len(operator) operator | type version | len(data) data
//
// Only nodes whose Save returned a non-nil blob are written. The blob
// carries no checksum of its own: snapshots wrap it (see Snapshot).
const instanceBlobVersion = 1

// Save returns the state of every stateful operator as one blob, each
// entry recording the node name, the operator name and its type version.
// It returns nil when no operator has state.
func (in *Instance) Save() ([]byte, error) {
	out, err := in.AppendSave(nil)
	if len(out) == 0 {
		return nil, err
	}
	return out, err
}

// AppendSave appends the instance's state blob to dst; see Save.
func (in *Instance) AppendSave(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = binary.AppendUvarint(dst, instanceBlobVersion)
	countAt := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0) // placeholder: count as a 5-byte padded uvarint
	count := 0
	for i, n := range in.g.nodes {
		if n.stateless {
			continue
		}
		data, err := in.ops[i].Save()
		if err != nil {
			return dst[:start], fmt.Errorf("save state of operator %q (node %q): %w", n.opName, n.name, err)
		}
		if data == nil {
			continue
		}
		count++
		dst = wire.AppendString(dst, n.name)
		dst = wire.AppendString(dst, n.opName)
		dst = binary.AppendUvarint(dst, uint64(n.version))
		dst = binary.AppendUvarint(dst, uint64(len(data)))
		dst = append(dst, data...)
	}
	if count == 0 {
		return dst[:start], nil
	}
	wire.PutPaddedUvarint(dst[countAt:countAt+5], uint64(count))
	return dst, nil
}

// loads checks that state saved by operator saved.Operator at
// saved.TypeVersion for node saved.Node loads into g: the node exists,
// runs that operator, and is at that version or can migrate from it (ops:
// the instance's operators, nil to build one to ask). It returns the
// node's index, or the error Load returns for such an entry.
func (g *Graph) loads(saved OperatorInfo, ops []Operator) (int, error) {
	idx := slices.IndexFunc(g.nodes, func(n node) bool { return n.name == saved.Node })
	if idx < 0 {
		return -1, &OperatorLoadError{Node: saved.Node, Operator: saved.Operator, Reason: "saved state belongs to a node the graph no longer has (allow non-restored state to drop it)"}
	}
	n := g.nodes[idx]
	if n.opName != saved.Operator {
		return -1, &OperatorLoadError{Node: saved.Node, Operator: n.opName, Reason: fmt.Sprintf("state was saved by operator %q", saved.Operator)}
	}
	if saved.TypeVersion == n.version {
		return idx, nil
	}
	var op Operator
	if ops != nil {
		op = ops[idx]
	} else {
		op = n.factory()
	}
	m, ok := op.(Migrator)
	if !ok || !slices.Contains(m.MigratesFrom(), saved.TypeVersion) {
		acc := []uint32{n.version}
		if ok {
			acc = append(acc, m.MigratesFrom()...)
		}
		return -1, &VersionError{Node: saved.Node, Operator: saved.Operator, Saved: saved.TypeVersion, Accepted: acc}
	}
	return idx, nil
}

// CheckRestore reports whether the state of a graph whose nodes were
// saved (a snapshot's SnapshotMeta.Operators, as WithGraph records them:
// the nodes that keep state) loads into g: every node saved is in g,
// runs the same operator, and is at the same type version or can migrate
// from it. Otherwise it returns every node that cannot, with the error
// Instance.Load would return for each key's state (an *OperatorLoadError
// or a *VersionError), joined: a checkpoint of another graph is refused
// once, at restore, not key by key. Nodes added since start empty, as
// Load starts them; a node of g that keeps no state is not checked (a
// snapshot recording every node, as WithOperators may, lists it too).
// It is CheckRestoreDropping with no dropped nodes, not allowing any.
func (g *Graph) CheckRestore(saved []OperatorInfo) error {
	_, err := g.CheckRestoreDropping(saved, nil, false)
	return err
}

// CheckRestoreDropping is CheckRestore for a snapshot that records the
// nodes earlier restores dropped (SnapshotMeta.DroppedNodes), and with
// allowNonRestored (allow non-restored state, like Flink's) a saved node g
// no longer has is dropped instead of refused; a node g still has that
// runs another operator, or is at a type version it neither is nor
// migrates from, is refused all the same. A node of g named as a dropped
// one is refused, whether allowNonRestored or not: keys not written since
// the drop may still hold the old node's state (see
// Instance.LoadDropping). It returns the nodes to drop from now on,
// sorted: those dropped before and those dropped now (nil for none).
func (g *Graph) CheckRestoreDropping(saved []OperatorInfo, dropped []string, allowNonRestored bool) ([]string, error) {
	var errs []error
	out := slices.Clone(dropped)
	for _, d := range dropped {
		if i := slices.IndexFunc(g.nodes, func(n node) bool { return n.name == d }); i >= 0 {
			errs = append(errs, &OperatorLoadError{Node: d, Operator: g.nodes[i].opName,
				Reason: "an earlier restore dropped the saved state of a node of this name (allow non-restored state), and keys not written since may still hold it: give the node another name (or restore from an empty durable store)"})
		}
	}
	for _, s := range saved {
		i := slices.IndexFunc(g.nodes, func(n node) bool { return n.name == s.Node })
		if i >= 0 && g.nodes[i].stateless || slices.Contains(dropped, s.Node) {
			continue
		}
		if i < 0 && allowNonRestored {
			out = append(out, s.Node)
			continue
		}
		if _, err := g.loads(s, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Load restores the instance from a blob made by Save. Nodes absent from
// the blob start fresh (a node added to the graph since the save). A blob
// entry for a node the graph no longer has, for a node now running another
// operator type, or at a type version the operator can neither read nor
// migrate is refused with an error naming the node — never a silent reset.
// An empty blob resets every operator. It is LoadDropping with no dropped
// nodes.
func (in *Instance) Load(blob []byte) error { return in.LoadDropping(blob, nil) }

// LoadDropping is Load skipping the blob's entries of the nodes named in
// dropped (a snapshot's SnapshotMeta.DroppedNodes: nodes whose state a
// restore dropped, see Graph.CheckRestoreDropping), whether the graph has
// a node of that name or not: such a node starts fresh.
func (in *Instance) LoadDropping(blob []byte, dropped []string) error {
	in.Reset()
	if len(blob) == 0 {
		return nil
	}
	r := wire.Reader{B: blob}
	ver := r.Uvarint()
	if r.Err == nil && ver != instanceBlobVersion {
		return fmt.Errorf("graph state blob: format version %d, this build reads %d: %w", ver, instanceBlobVersion, ErrCorrupt)
	}
	count := r.PaddedUvarint()
	seen := make([]bool, len(in.g.nodes))
	for k := uint64(0); k < count && r.Err == nil; k++ {
		nodeName := r.Str()
		opName := r.Str()
		version64 := r.Uvarint()
		data := r.Bytes()
		if r.Err != nil {
			break
		}
		if version64 > 1<<32-1 {
			return &OperatorLoadError{Node: nodeName, Operator: opName, Reason: fmt.Sprintf("type version %d overflows uint32", version64), Err: ErrCorrupt}
		}
		version := uint32(version64)
		if slices.Contains(dropped, nodeName) {
			continue
		}
		idx, err := in.g.loads(OperatorInfo{Node: nodeName, Operator: opName, TypeVersion: version}, in.ops)
		if err != nil {
			return err
		}
		if seen[idx] {
			return &OperatorLoadError{Node: nodeName, Operator: opName, Reason: "state appears twice in the blob", Err: ErrCorrupt}
		}
		seen[idx] = true
		n := in.g.nodes[idx]
		op := in.ops[idx]
		if version != n.version {
			migrated, err := op.(Migrator).Migrate(version, data)
			if err != nil {
				return &OperatorLoadError{Node: nodeName, Operator: opName, Reason: fmt.Sprintf("migrate from type version %d to %d", version, n.version), Err: err}
			}
			data = migrated
		}
		if err := op.Load(data); err != nil {
			if le, ok := err.(*OperatorLoadError); ok && le.Node == "" {
				cp := *le
				cp.Node = nodeName
				return &cp
			}
			return &OperatorLoadError{Node: nodeName, Operator: opName, Reason: "operator refused its state", Err: err}
		}
	}
	if r.Err != nil {
		return fmt.Errorf("graph state blob: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(blob) {
		return fmt.Errorf("graph state blob: %d trailing bytes: %w", len(blob)-r.Off, ErrCorrupt)
	}
	return nil
}
