// Package optest holds the conformance checks the operator catalogs
// (streaming/ops, streaming/fintech) share in their tests: output
// comparison, refusal of bad state blobs, and the behaviour of a blob Load
// accepted.
package optest

import (
	"bytes"
	"errors"
	"maps"
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

// Catalog describes a catalog's registrations for CheckTypes.
type Catalog struct {
	// Types are the catalog's declarations (ops.Types, fintech.Types).
	Types []streaming.OperatorType
	// Required gives, per type with required parameters, values for them.
	Required map[string]map[string]any
	// Companions gives, per type and parameter, the values other
	// parameters take while that one is at a bound (fast at its maximum
	// needs slow at its own).
	Companions map[string]map[string]map[string]any
	// StateNames maps a type whose operators' Name() differs from the
	// type name to that Name().
	StateNames map[string]string
}

// CheckTypes checks a catalog's declarations: they register; every type,
// parameter and output is documented; each builds through
// Registry.Factory with its defaults (plus Required) into an operator
// whose Name, TypeVersion and Arity match the declaration; every numeric
// parameter builds at its Min and Max and is refused, naming it, just
// outside them; and each type's operator is a fresh value per factory
// call.
func CheckTypes(t *testing.T, c Catalog) {
	t.Helper()
	r := streaming.NewRegistry()
	for _, typ := range c.Types {
		if err := r.Register(typ); err != nil {
			t.Fatalf("register %q: %v", typ.Name, err)
		}
	}
	for _, typ := range c.Types {
		t.Run(typ.Name, func(t *testing.T) {
			if typ.Doc == "" || typ.Output == "" || typ.Inputs == "" {
				t.Fatalf("type %q lacks a doc, output or inputs description", typ.Name)
			}
			base := map[string]any{}
			for _, p := range typ.Params {
				if p.Doc == "" {
					t.Fatalf("parameter %q has no doc", p.Name)
				}
				if p.Default == nil {
					v, ok := c.Required[typ.Name][p.Name]
					if !ok {
						t.Fatalf("required parameter %q has no test value in Catalog.Required", p.Name)
					}
					base[p.Name] = v
				}
			}
			check := func(raw map[string]any) {
				t.Helper()
				f, err := r.Factory(typ.Name, raw)
				if err != nil {
					t.Fatalf("Factory(%v): %v", raw, err)
				}
				op, again := f(), f()
				if op == again {
					t.Fatalf("Factory(%v) returned one operator for two keys", raw)
				}
				name := typ.Name
				if n, ok := c.StateNames[typ.Name]; ok {
					name = n
				}
				if op.Name() != name || op.TypeVersion() != typ.TypeVersion {
					t.Fatalf("built %s v%d, declared %s v%d", op.Name(), op.TypeVersion(), name, typ.TypeVersion)
				}
				if a, ok := op.(streaming.Arity); ok {
					if lo, hi := a.Arity(); lo != typ.MinInputs || hi != typ.MaxInputs {
						t.Fatalf("Arity %d..%d, declared %d..%d", lo, hi, typ.MinInputs, typ.MaxInputs)
					}
				}
			}
			check(base)
			requireModesNamed(t, typ, r, base)
			for _, p := range typ.Params {
				for _, b := range []struct {
					bound *float64
					out   float64 // direction of the value just outside
				}{{p.Min, -1}, {p.Max, 1}} {
					if b.bound == nil || (p.Kind != streaming.ParamInt && p.Kind != streaming.ParamFloat) {
						continue
					}
					raw := maps.Clone(base)
					maps.Copy(raw, c.Companions[typ.Name][p.Name])
					raw[p.Name] = *b.bound
					check(raw)
					outside := *b.bound + b.out
					if p.Kind == streaming.ParamFloat {
						outside = math.Nextafter(*b.bound, b.out*math.Inf(1))
					}
					raw[p.Name] = outside
					_, err := r.Factory(typ.Name, raw)
					var pe *streaming.ParamError
					if !errors.As(err, &pe) || pe.Param != p.Name || pe.Operator != typ.Name {
						t.Fatalf("%s = %v: got %v, want a ParamError naming %s of %s", p.Name, outside, err, p.Name, typ.Name)
					}
				}
			}
		})
	}
}

// requireModesNamed feeds a rising then falling ramp (volume 1 on any
// second input) to an operator of typ and fails if it emits a signal
// whose mode typ.Modes does not name.
func requireModesNamed(t *testing.T, typ streaming.OperatorType, r *streaming.Registry, raw map[string]any) {
	t.Helper()
	f, err := r.Factory(typ.Name, raw)
	if err != nil {
		t.Fatal(err)
	}
	op := f()
	in := make([]streaming.Computed, max(typ.MinInputs, 1))
	for i := range 400 {
		x := float64(i)
		if i >= 200 {
			x = float64(400 - i)
		}
		in[0] = streaming.Float(x)
		for j := 1; j < len(in); j++ {
			in[j] = streaming.Float(1)
		}
		out := op.Eval(in, int64(i))
		if out.Kind() == streaming.KindSignal {
			if _, ok := typ.Modes[out.Mode()]; !ok {
				t.Fatalf("emitted mode %d, which Modes (%v) does not name", out.Mode(), typ.Modes)
			}
		}
	}
}

// FiniteOutput reports whether c is None or holds a finite value.
func FiniteOutput(c streaming.Computed) bool {
	if c.IsNone() {
		return true
	}
	v := c.Float64()
	return !math.IsNaN(v) && !math.IsInf(v, 0)
}

// RunSaving feeds records (one value per input each) to an operator from
// newOp at event times 0, 1, 2, ... and returns its outputs. After every
// record it checks the output is None or finite, and that the state Save
// returns loads into a fresh operator from newOp, which then continues in
// its place (so a Load refusing what Save wrote fails the test).
func RunSaving(t testing.TB, newOp func() streaming.Operator, records [][]float64) []streaming.Computed {
	t.Helper()
	op := newOp()
	out := make([]streaming.Computed, len(records))
	for i, rec := range records {
		in := make([]streaming.Computed, len(rec))
		for j, v := range rec {
			in[j] = streaming.Float(v)
		}
		out[i] = op.Eval(in, int64(i))
		if !FiniteOutput(out[i]) {
			t.Fatalf("record %d %v: output %v is not finite", i, rec, out[i])
		}
		blob, err := op.Save()
		if err != nil {
			t.Fatalf("record %d: Save: %v", i, err)
		}
		op = newOp()
		if err := op.Load(blob); err != nil {
			t.Fatalf("record %d %v: Load of what Save wrote: %v", i, rec, err)
		}
	}
	return out
}

// Config is a registered operator type with parameters, for
// CheckFiniteInputs.
type Config struct {
	Type   string
	Params map[string]any
}

// FuzzFloats decodes fuzz bytes into finite floats of any magnitude: 8
// little-endian bytes each, NaN and ±Inf bit patterns folded onto
// ±MaxFloat64; a trailing partial group becomes a small integer, so short
// inputs still feed ordinary values.
func FuzzFloats(data []byte) []float64 {
	var out []float64
	for len(data) >= 8 {
		v := math.Float64frombits(uint64(data[0]) | uint64(data[1])<<8 | uint64(data[2])<<16 | uint64(data[3])<<24 |
			uint64(data[4])<<32 | uint64(data[5])<<40 | uint64(data[6])<<48 | uint64(data[7])<<56)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			v = math.Copysign(math.MaxFloat64, v)
		}
		out = append(out, v)
		data = data[8:]
	}
	for _, b := range data {
		out = append(out, float64(int8(b)))
	}
	return out
}

// CheckFiniteInputs is one fuzz step over configured operators: the
// values (consumed MinInputs at a time per record) go through an
// operator that is saved and reloaded into a fresh one after every record
// and through an uninterrupted twin. Every output must be None or finite,
// Load must accept every blob Save wrote, and both must emit the same.
func CheckFiniteInputs(t *testing.T, r *streaming.Registry, cfgs []Config, values []float64) {
	t.Helper()
	for _, c := range cfgs {
		typ, ok := r.Lookup(c.Type)
		if !ok {
			t.Fatalf("unknown type %q", c.Type)
		}
		f, err := r.Factory(c.Type, c.Params)
		if err != nil {
			t.Fatalf("%s %v: %v", c.Type, c.Params, err)
		}
		arity := max(typ.MinInputs, 1)
		var records [][]float64
		for i := 0; i+arity <= len(values); i += arity {
			records = append(records, values[i:i+arity])
		}
		saved := RunSaving(t, f, records)
		twin := f()
		for i, rec := range records {
			in := make([]streaming.Computed, len(rec))
			for j, v := range rec {
				in[j] = streaming.Float(v)
			}
			if got := twin.Eval(in, int64(i)); got != saved[i] {
				t.Fatalf("%s %v, record %d %v: uninterrupted %v, saved and reloaded %v", c.Type, c.Params, i, rec, got, saved[i])
			}
		}
	}
}
