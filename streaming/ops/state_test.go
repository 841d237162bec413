package ops

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// catalog is every operator of the package, freshly made, with a second
// configuration that must refuse the first one's state.
var catalog = []struct {
	name  string
	make  func() streaming.Operator
	other func() streaming.Operator
}{
	{"sma", func() streaming.Operator { return NewSMA(5) }, func() streaming.Operator { return NewSMA(6) }},
	{"ema", func() streaming.Operator { return NewEMA(5) }, func() streaming.Operator { return NewEMA(4) }},
	{"hysteresis", func() streaming.Operator { return NewHysteresis(18, 22) }, func() streaming.Operator { return NewHysteresis(18, 23) }},
	{"threshold_cross", func() streaming.Operator { return NewThresholdCross(20, WithDwell(2)) },
		func() streaming.Operator { return NewThresholdCross(20) }},
	{"deadband", func() streaming.Operator { return NewDeadband(0.5) }, func() streaming.Operator { return NewDeadband(0.25) }},
	{"rate_of_change", func() streaming.Operator { return NewRateOfChange() }, func() streaming.Operator { return NewRateOfChange(Per(60)) }},
	{"rolling_min", func() streaming.Operator { return NewRollingMin(6) }, func() streaming.Operator { return NewRollingMin(7) }},
	{"rolling_max", func() streaming.Operator { return NewRollingMax(6) }, func() streaming.Operator { return NewRollingMax(2) }},
	{"median_despike", func() streaming.Operator { return NewMedianDespike(5, 2) }, func() streaming.Operator { return NewMedianDespike(5, 3) }},
	// Partial warm-up.
	{"sma", func() streaming.Operator { return NewSMA(5).WithWarmup(streaming.WarmupPartial) }, func() streaming.Operator { return NewSMA(4) }},
	{"ema", func() streaming.Operator { return NewEMA(5).WithWarmup(streaming.WarmupPartial) }, func() streaming.Operator { return NewEMA(6) }},
	{"rolling_min", func() streaming.Operator { return NewRollingMin(6).WithWarmup(streaming.WarmupPartial) },
		func() streaming.Operator { return NewRollingMin(5) }},
	{"median_despike", func() streaming.Operator { return NewMedianDespike(4, 2).WithWarmup(streaming.WarmupPartial) },
		func() streaming.Operator { return NewMedianDespike(5, 2) }},
}

// Saving mid-stream and loading into a fresh operator continues exactly
// (bit for bit) like the uninterrupted run, at every cut point including
// during warm-up; Reset returns to the fresh behaviour.
func TestSaveLoadContinuesUninterrupted(t *testing.T) {
	xs := noisy(7, 400)
	for _, c := range catalog {
		t.Run(c.name, func(t *testing.T) {
			if got := c.make().Name(); got != c.name {
				t.Fatalf("Name() = %q, want %q", got, c.name)
			}
			want := feed(c.make(), xs)
			for _, cut := range []int{0, 1, 2, 3, 5, 8, 50, 199, 400} {
				a := c.make()
				feed(a, xs[:cut])
				blob, err := a.Save()
				if err != nil {
					t.Fatalf("cut %d: Save: %v", cut, err)
				}
				b := c.make()
				feed(b, noisy(99, 30)) // dirty state that Load must replace
				if err := b.Load(blob); err != nil {
					t.Fatalf("cut %d: Load: %v", cut, err)
				}
				again, _ := b.Save()
				if !bytes.Equal(blob, again) {
					t.Fatalf("cut %d: Save after Load differs:\n%x\n%x", cut, blob, again)
				}
				got := make([]streaming.Computed, 0, len(xs)-cut)
				in := make([]streaming.Computed, 1)
				for i := cut; i < len(xs); i++ {
					in[0] = f(xs[i])
					got = append(got, b.Eval(in, int64(i)))
				}
				for i := range got {
					if got[i] != want[cut+i] { // exact: Computed is comparable
						t.Fatalf("cut %d, record %d: got %v, uninterrupted run %v", cut, cut+i, got[i], want[cut+i])
					}
				}
			}
			r := c.make()
			feed(r, xs[:123])
			r.Reset()
			got := feed(r, xs)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("after Reset, record %d: got %v, fresh run %v", i, got[i], want[i])
				}
			}
		})
	}
}

// A bad blob is refused with an *OperatorLoadError; undecodable bytes wrap
// ErrCorrupt, and state saved by another configuration names the mismatch.
// A refused Load leaves the operator as it was.
func TestLoadRefusesBadBlobs(t *testing.T) {
	for _, c := range catalog {
		t.Run(c.name, func(t *testing.T) {
			a := c.make()
			feed(a, noisy(3, 40))
			t.Log(optest.RequireLoadRefusesBadBlobs(t, c.name, a, c.other()))
		})
	}
}

// A state blob of a type version the operator neither is nor migrates from
// is refused through Instance.Load with a *VersionError naming the node,
// the saved version and the accepted ones.
func TestInstanceLoadRefusesOtherTypeVersion(t *testing.T) {
	future := buildOne(t, func() streaming.Operator { return &fakeVersion{name: "ema", version: 7} })
	in := future.NewInstance()
	in.Eval(0, f(1))
	blob, err := in.Save()
	if err != nil {
		t.Fatal(err)
	}
	cur := buildOne(t, func() streaming.Operator { return NewEMA(3) }).NewInstance()
	err = cur.Load(blob)
	var ve *streaming.VersionError
	if !errors.As(err, &ve) {
		t.Fatalf("Load: got %v, want *VersionError", err)
	}
	if ve.Node != "n" || ve.Operator != "ema" || ve.Saved != 7 || fmt.Sprint(ve.Accepted) != "[2 1]" {
		t.Fatalf("VersionError %+v: want node n, operator ema, saved 7, accepted [2 1]", ve)
	}

	// SMA accepts 2 and migrates 1, but not 9.
	future = buildOne(t, func() streaming.Operator { return &fakeVersion{name: "sma", version: 9} })
	in = future.NewInstance()
	in.Eval(0, f(1))
	blob, _ = in.Save()
	err = buildOne(t, func() streaming.Operator { return NewSMA(3) }).NewInstance().Load(blob)
	if !errors.As(err, &ve) || ve.Saved != 9 || fmt.Sprint(ve.Accepted) != "[2 1]" {
		t.Fatalf("Load: got %v, want *VersionError saved 9 accepting [2 1]", err)
	}
}

// SMA TypeVersion 1 state (the window values only, as an earlier release
// saved it) migrates to version 2 through Instance.Load, and the migrated
// SMA continues like one that never stopped.
func TestSMAMigratesFromVersion1(t *testing.T) {
	xs := noisy(11, 200)
	old := buildOne(t, func() streaming.Operator { return &smaV1{n: 6} }).NewInstance()
	for i, x := range xs[:100] {
		old.Eval(int64(i), f(x))
	}
	blob, err := old.Save()
	if err != nil {
		t.Fatal(err)
	}
	g := buildOne(t, func() streaming.Operator { return NewSMA(6) })
	migrated := g.NewInstance()
	if err := migrated.Load(blob); err != nil {
		t.Fatalf("Load of a version 1 blob: %v", err)
	}
	ref := g.NewInstance()
	emitted := 0
	for i, x := range xs {
		ref.Eval(int64(i), f(x))
		if i < 100 {
			continue
		}
		migrated.Eval(int64(i), f(x))
		w, got := ref.Output(0), migrated.Output(0)
		if !optest.ApproxEqual(w, got) {
			t.Fatalf("record %d: migrated SMA %v, uninterrupted %v", i, got, w)
		}
		if !got.IsNone() {
			emitted++
		}
	}
	if emitted < 50 {
		t.Fatalf("only %d outputs compared", emitted)
	}

	// A corrupt version 1 blob fails the migration, naming the node.
	bad := &smaV1{n: 6, vals: []float64{1, 2}}
	data, _ := bad.Save()
	_, err = NewSMA(6).Migrate(1, data[:len(data)-3])
	if !errors.Is(err, streaming.ErrCorrupt) {
		t.Fatalf("Migrate of a truncated blob: %v, want ErrCorrupt", err)
	}
}

func buildOne(t *testing.T, mk func() streaming.Operator) *streaming.Graph {
	t.Helper()
	g, err := streaming.NewBuilder().Input("x").Node("n", mk, "x").Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fakeVersion stands in for an operator of another release: same name,
// another TypeVersion.
type fakeVersion struct {
	streaming.Base
	name    string
	version uint32
}

func (o *fakeVersion) Name() string        { return o.name }
func (o *fakeVersion) TypeVersion() uint32 { return o.version }
func (o *fakeVersion) Eval([]streaming.Computed, int64) streaming.NodeOutput {
	return streaming.NoOutput()
}
func (o *fakeVersion) Save() ([]byte, error) { return []byte{1, 2, 3}, nil }

// smaV1 is the SMA of TypeVersion 1, written out here as that release
// saved it: window | count | values oldest first, no running sum.
type smaV1 struct {
	streaming.Base
	n    int
	vals []float64
}

func (*smaV1) Name() string        { return "sma" }
func (*smaV1) TypeVersion() uint32 { return 1 }
func (s *smaV1) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	if x := in[0].Float64(); valid(x) {
		s.vals = append(s.vals, x)
		if len(s.vals) > s.n {
			s.vals = s.vals[1:]
		}
	}
	return streaming.NoOutput()
}
func (s *smaV1) Save() ([]byte, error) {
	b := putU(nil, uint64(s.n))
	b = putU(b, uint64(len(s.vals)))
	for _, v := range s.vals {
		b = putF(b, v)
	}
	return b, nil
}

// EMA TypeVersion 1 state (a plain warm-up sum), saved by the earlier
// release as NewEMA(4) after 10 11 12.5, migrates to version 2 through
// Instance.Load and continues like an uninterrupted run.
func TestEMAMigratesFromVersion1(t *testing.T) {
	v1, _ := hex.DecodeString("04030000000000c040400000000000000000")
	xs := []float64{10, 11, 12.5, 13, 12, 14.5, 15}
	g := buildOne(t, func() streaming.Operator { return NewEMA(4) })
	ref := g.NewInstance()
	migrated := g.NewInstance()
	old := buildOne(t, func() streaming.Operator { return &savedAs{name: "ema", version: 1, blob: v1} }).NewInstance()
	blob, err := old.Save()
	if err != nil {
		t.Fatal(err)
	}
	if err := migrated.Load(blob); err != nil {
		t.Fatalf("Load of a version 1 blob: %v", err)
	}
	for i, x := range xs {
		ref.Eval(int64(i), f(x))
		if i < 3 {
			continue
		}
		migrated.Eval(int64(i), f(x))
		if w, got := ref.Output(0), migrated.Output(0); got.IsNone() || w != got {
			t.Fatalf("record %d: migrated EMA %v, uninterrupted %v", i, got, w)
		}
	}
	_, err = NewEMA(4).Migrate(1, v1[:5])
	if !errors.Is(err, streaming.ErrCorrupt) {
		t.Fatalf("Migrate of a truncated blob: %v, want ErrCorrupt", err)
	}
}

// savedAs stands in for an operator of an earlier release whose state was
// blob.
type savedAs struct {
	streaming.Base
	name    string
	version uint32
	blob    []byte
}

func (o *savedAs) Name() string        { return o.name }
func (o *savedAs) TypeVersion() uint32 { return o.version }
func (o *savedAs) Eval([]streaming.Computed, int64) streaming.NodeOutput {
	return streaming.NoOutput()
}
func (o *savedAs) Save() ([]byte, error) { return o.blob, nil }
