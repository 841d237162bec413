// Package optest holds the conformance checks the operator catalogs
// (streaming/ops, streaming/fintech) share in their tests: output
// comparison, refusal of bad state blobs, and the behaviour of a blob Load
// accepted.
package optest

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/tflo-io/tflo/streaming"
)

// ApproxEqual compares two outputs: same kind and mode, values equal
// within a relative 1e-9 (exact for non-floats).
func ApproxEqual(a, b streaming.Computed) bool {
	if a.Kind() != b.Kind() || a.Mode() != b.Mode() {
		return false
	}
	if a.IsNone() {
		return true
	}
	x, y := a.Float64(), b.Float64()
	return x == y || math.Abs(x-y) <= 1e-9*math.Max(1, math.Max(math.Abs(x), math.Abs(y)))
}

// RequireOutputs fails t unless got matches want output by output
// (ApproxEqual).
func RequireOutputs(t testing.TB, want, got []streaming.Computed) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("got %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if !ApproxEqual(want[i], got[i]) {
			t.Fatalf("output %d: got %v, want %v (all: got %v, want %v)", i, got[i], want[i], got, want)
		}
	}
}

// RequireLoadRefusesBadBlobs checks op (named name, holding some state):
// a truncated, extended or empty copy of its blob is refused with an
// *OperatorLoadError naming the operator and wrapping ErrCorrupt, and
// leaves the state as it was; other, an operator of another
// configuration, refuses the blob as a mismatch (not ErrCorrupt). It
// returns other's error.
func RequireLoadRefusesBadBlobs(t testing.TB, name string, op, other streaming.Operator) error {
	t.Helper()
	blob, err := op.Save()
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	for what, bad := range map[string][]byte{
		"truncated":      blob[:len(blob)-1],
		"trailing bytes": append(bytes.Clone(blob), 0),
		"empty":          {},
	} {
		err := op.Load(bad)
		var le *streaming.OperatorLoadError
		if !errors.As(err, &le) || !errors.Is(err, streaming.ErrCorrupt) {
			t.Fatalf("%s: got %v, want *OperatorLoadError wrapping ErrCorrupt", what, err)
		}
		if le.Operator != name {
			t.Fatalf("%s: error names operator %q, want %q", what, le.Operator, name)
		}
		if after, _ := op.Save(); !bytes.Equal(blob, after) {
			t.Fatalf("%s: refused Load changed the state", what)
		}
	}
	err = other.Load(blob)
	var le *streaming.OperatorLoadError
	if !errors.As(err, &le) || errors.Is(err, streaming.ErrCorrupt) {
		t.Fatalf("other configuration: got %v, want a configuration mismatch *OperatorLoadError", err)
	}
	return err
}

// CheckLoad is one fuzz step: a fresh operator from newOp loads data; if it
// accepts, the state must behave — feed (more input) works, and the blob
// Save returns right after the Load reloads into another fresh operator
// and saves back unchanged.
func CheckLoad(t testing.TB, name string, data []byte, newOp func() streaming.Operator, feed func(streaming.Operator)) {
	t.Helper()
	op := newOp()
	if err := op.Load(data); err != nil {
		return
	}
	saved, err := op.Save()
	if err != nil {
		t.Fatalf("%s: Save after accepted Load: %v", name, err)
	}
	feed(op)
	again := newOp()
	if err := again.Load(saved); err != nil {
		t.Fatalf("%s: reloading its own Save: %v", name, err)
	}
	if s2, _ := again.Save(); !bytes.Equal(saved, s2) {
		t.Fatalf("%s: Save/Load/Save not stable", name)
	}
}
