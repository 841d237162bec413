package streaming

import (
	"encoding/binary"
	"fmt"
	"slices"
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
		dst = appendString(dst, n.name)
		dst = appendString(dst, n.opName)
		dst = binary.AppendUvarint(dst, uint64(n.version))
		dst = binary.AppendUvarint(dst, uint64(len(data)))
		dst = append(dst, data...)
	}
	if count == 0 {
		return dst[:start], nil
	}
	putPaddedUvarint(dst[countAt:countAt+5], uint64(count))
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
	r := reader{b: blob}
	ver := r.uvarint()
	if r.err == nil && ver != instanceBlobVersion {
		return fmt.Errorf("graph state blob: format version %d, this build reads %d: %w", ver, instanceBlobVersion, ErrCorrupt)
	}
	count := r.paddedUvarint()
	seen := make([]bool, len(in.g.nodes))
	for k := uint64(0); k < count && r.err == nil; k++ {
		nodeName := r.string()
		opName := r.string()
		version := uint32(r.uvarint())
		data := r.bytes()
		if r.err != nil {
			break
		}
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
	if r.err != nil {
		return fmt.Errorf("graph state blob: %v: %w", r.err, ErrCorrupt)
	}
	if r.off != len(blob) {
		return fmt.Errorf("graph state blob: %d trailing bytes: %w", len(blob)-r.off, ErrCorrupt)
	}
	return nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// putPaddedUvarint writes v as a uvarint that always takes len(b) bytes
// (continuation bits on every byte but the last), so a count can be patched
// in after the entries are written.
func putPaddedUvarint(b []byte, v uint64) {
	for i := range b {
		c := byte(v & 0x7f)
		v >>= 7
		if i < len(b)-1 {
			c |= 0x80
		}
		b[i] = c
	}
}

// reader decodes the varint framing used by state blobs; the first error
// sticks and later reads return zero values.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("truncated or overlong varint at byte %d", r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) paddedUvarint() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 5 {
		r.err = fmt.Errorf("truncated entry count at byte %d", r.off)
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off : r.off+5])
	if n != 5 {
		r.err = fmt.Errorf("malformed entry count at byte %d", r.off)
		return 0
	}
	r.off += 5
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("length %d at byte %d runs past the end (%d bytes)", n, r.off, len(r.b))
		return nil
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *reader) string() string { return string(r.bytes()) }
