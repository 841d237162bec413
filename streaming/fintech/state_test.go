package fintech

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

// catalog is every operator of the package, freshly made, with a second
// configuration that must refuse the first one's state.
var catalog = []struct {
	name  string
	make  func() streaming.Operator
	other func() streaming.Operator
}{
	{"vwap", func() streaming.Operator { return NewVWAP(0) }, func() streaming.Operator { return NewVWAP(10) }},
	{"vwap", func() streaming.Operator { return NewVWAP(10) }, func() streaming.Operator { return NewVWAP(11) }},
	{"rsi", func() streaming.Operator { return NewRSI(14) }, func() streaming.Operator { return NewRSI(9) }},
	{"bollinger", func() streaming.Operator { return NewBollinger(20, 2, Upper) },
		func() streaming.Operator { return NewBollinger(20, 2, Lower) }},
	{"macd", func() streaming.Operator { return NewMACD(12, 26, 9, MACDLine) },
		func() streaming.Operator { return NewMACD(12, 26, 5, MACDLine) }},
	{"ma_crossover", func() streaming.Operator { return NewMACrossover(5, 20) },
		func() streaming.Operator { return NewMACrossover(5, 21) }},
	// Warm-up policies other than the default.
	{"vwap", func() streaming.Operator { return NewVWAP(10).WithWarmup(streaming.WarmupFull) }, func() streaming.Operator { return NewVWAP(9) }},
	{"rsi", func() streaming.Operator { return NewRSI(14).WithWarmup(streaming.WarmupPartial) }, func() streaming.Operator { return NewRSI(13) }},
	{"bollinger", func() streaming.Operator { return NewBollinger(20, 2, Lower).WithWarmup(streaming.WarmupPartial) },
		func() streaming.Operator { return NewBollinger(20, 2, Upper) }},
	{"macd", func() streaming.Operator { return NewMACD(12, 26, 9, MACDSignal).WithWarmup(streaming.WarmupPartial) },
		func() streaming.Operator { return NewMACD(12, 26, 9, MACDSignal) }},
	{"ma_crossover", func() streaming.Operator { return NewMACrossover(5, 20).WithWarmup(streaming.WarmupPartial) },
		func() streaming.Operator { return NewMACrossover(6, 20) }},
}

// Saving mid-stream and loading into a fresh operator continues exactly
// (bit for bit) like the uninterrupted run, at cut points in and after
// warm-up; Reset returns to the fresh behaviour.
func TestSaveLoadContinuesUninterrupted(t *testing.T) {
	ticks := market(7, 300)
	for _, c := range catalog {
		t.Run(c.name, func(t *testing.T) {
			if got := c.make().Name(); got != c.name {
				t.Fatalf("Name() = %q, want %q", got, c.name)
			}
			want := feed(c.make(), ticks)
			for _, cut := range []int{0, 1, 2, 9, 19, 20, 21, 33, 34, 35, 150, 300} {
				a := c.make()
				feed(a, ticks[:cut])
				blob, err := a.Save()
				if err != nil {
					t.Fatalf("cut %d: Save: %v", cut, err)
				}
				b := c.make()
				feed(b, market(99, 40)) // dirty state that Load must replace
				if err := b.Load(blob); err != nil {
					t.Fatalf("cut %d: Load: %v", cut, err)
				}
				if again, _ := b.Save(); !bytes.Equal(blob, again) {
					t.Fatalf("cut %d: Save after Load differs:\n%x\n%x", cut, blob, again)
				}
				for i := cut; i < len(ticks); i++ {
					if got := feed1(b, ticks[i], int64(i)); got != want[i] {
						t.Fatalf("cut %d, tick %d: got %v, uninterrupted run %v", cut, i, got, want[i])
					}
				}
			}
			r := c.make()
			feed(r, ticks[:77])
			r.Reset()
			got := feed(r, ticks)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("after Reset, tick %d: got %v, fresh run %v", i, got[i], want[i])
				}
			}
		})
	}
}

// A bad blob is refused with an *OperatorLoadError naming the operator;
// undecodable bytes wrap ErrCorrupt; another configuration's state is a
// mismatch. A refused Load leaves the operator as it was.
func TestLoadRefusesBadBlobs(t *testing.T) {
	for _, c := range catalog {
		t.Run(c.name, func(t *testing.T) {
			a := c.make()
			feed(a, market(3, 60))
			optest.RequireLoadRefusesBadBlobs(t, c.name, a, c.other())
		})
	}
}

// Through a keyed graph: per-key state saves and loads as one blob, and a
// blob written by another TypeVersion of an operator is refused with a
// *VersionError naming the node.
func TestInstanceSaveLoadAndVersion(t *testing.T) {
	g, err := streaming.NewBuilder().Input("price", "volume").
		Node("vwap", func() streaming.Operator { return NewVWAP(0) }, "price", "volume").
		Node("rsi", func() streaming.Operator { return NewRSI(3) }, "price").
		Build()
	if err != nil {
		t.Fatal(err)
	}
	ticks := market(5, 50)
	a, ref := g.NewInstance(), g.NewInstance()
	for i, tk := range ticks {
		ref.Eval(int64(i), f(tk.p), f(tk.v))
		if i < 25 {
			a.Eval(int64(i), f(tk.p), f(tk.v))
		}
		if i == 24 {
			blob, err := a.Save()
			if err != nil {
				t.Fatal(err)
			}
			a = g.NewInstance()
			if err := a.Load(blob); err != nil {
				t.Fatal(err)
			}
		}
		if i >= 25 {
			a.Eval(int64(i), f(tk.p), f(tk.v))
			for o := range a.NumOutputs() {
				if a.Output(o) != ref.Output(o) {
					t.Fatalf("tick %d output %d: restored %v, uninterrupted %v", i, o, a.Output(o), ref.Output(o))
				}
			}
		}
	}

	old, err := streaming.NewBuilder().Input("price", "volume").
		Node("rsi", func() streaming.Operator { return &otherVersion{name: "rsi", version: 3} }, "price").
		Build()
	if err != nil {
		t.Fatal(err)
	}
	in := old.NewInstance()
	in.Eval(0, f(1), f(1))
	blob, _ := in.Save()
	err = g.NewInstance().Load(blob)
	var ve *streaming.VersionError
	if !errors.As(err, &ve) || ve.Node != "rsi" || ve.Saved != 3 || fmt.Sprint(ve.Accepted) != "[1]" {
		t.Fatalf("Load: got %v, want *VersionError for node rsi, saved 3, accepted [1]", err)
	}
}

type otherVersion struct {
	streaming.Base
	name    string
	version uint32
}

func (o *otherVersion) Name() string        { return o.name }
func (o *otherVersion) TypeVersion() uint32 { return o.version }
func (o *otherVersion) Eval([]streaming.Computed, int64) streaming.NodeOutput {
	return streaming.NoOutput()
}
func (o *otherVersion) Save() ([]byte, error) { return []byte{9}, nil }

// FuzzLoad feeds arbitrary bytes to every operator's Load: never a panic,
// and an accepted blob behaves (Eval works, Save/Load/Save is stable).
func FuzzLoad(f *testing.F) {
	for _, c := range catalog {
		op := c.make()
		feed(op, market(5, 40))
		blob, _ := op.Save()
		f.Add(blob)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range catalog {
			optest.CheckLoad(t, c.name, data, c.make, func(op streaming.Operator) { feed(op, market(1, 40)) })
		}
	})
}

// Every operator's per-event path allocates nothing.
func TestEvalDoesNotAllocate(t *testing.T) {
	ticks := market(13, 256)
	for _, c := range catalog {
		t.Run(c.name, func(t *testing.T) {
			op := c.make()
			lo, _ := op.(streaming.Arity).Arity()
			in := make([]streaming.Computed, lo)
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				tk := ticks[i%len(ticks)]
				in[0] = streaming.Float(tk.p)
				if lo > 1 {
					in[1] = streaming.Float(tk.v)
				}
				op.Eval(in, int64(i))
				i++
			})
			if allocs != 0 {
				t.Fatalf("Eval allocates %v times per event", allocs)
			}
		})
	}
}
