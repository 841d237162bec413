package streaming

import (
	"encoding/binary"
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

// Load restores the instance from a blob made by Save. Nodes absent from
// the blob start fresh (a node added to the graph since the save). A blob
// entry for a node the graph no longer has, for a node now running another
// operator type, or at a type version the operator can neither read nor
// migrate is refused with an error naming the node — never a silent reset.
// An empty blob resets every operator.
func (in *Instance) Load(blob []byte) error {
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
		idx := slices.IndexFunc(in.g.nodes, func(n node) bool { return n.name == nodeName })
		if idx < 0 {
			return &OperatorLoadError{Node: nodeName, Operator: opName, Reason: "saved state belongs to a node the graph no longer has"}
		}
		if seen[idx] {
			return &OperatorLoadError{Node: nodeName, Operator: opName, Reason: "state appears twice in the blob", Err: ErrCorrupt}
		}
		seen[idx] = true
		n := in.g.nodes[idx]
		if n.opName != opName {
			return &OperatorLoadError{Node: nodeName, Operator: n.opName, Reason: fmt.Sprintf("state was saved by operator %q", opName)}
		}
		op := in.ops[idx]
		if version != n.version {
			m, ok := op.(Migrator)
			if !ok || !slices.Contains(m.MigratesFrom(), version) {
				acc := []uint32{n.version}
				if ok {
					acc = append(acc, m.MigratesFrom()...)
				}
				return &VersionError{Node: nodeName, Operator: opName, Saved: version, Accepted: acc}
			}
			migrated, err := m.Migrate(version, data)
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
