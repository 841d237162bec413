package ops

import (
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

// FuzzLoad feeds arbitrary bytes to every operator's Load: it must never
// panic, and a blob it accepts must behave — Eval works, and Save then
// Load reproduces the same blob.
func FuzzLoad(f *testing.F) {
	for _, c := range catalog {
		op := c.make()
		feed(op, noisy(5, 20))
		blob, _ := op.Save()
		f.Add(blob)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range catalog {
			optest.CheckLoad(t, c.name, data, c.make, func(op streaming.Operator) { feed(op, []float64{1, nan, 2, -3, 4, 5, 6, 7, 8}) })
		}
	})
}

// Every operator's per-event path allocates nothing, in warm-up, in steady
// state and on NaN input.
func TestEvalDoesNotAllocate(t *testing.T) {
	xs := noisy(13, 256)
	for _, c := range catalog {
		t.Run(c.name, func(t *testing.T) {
			op := c.make()
			in := make([]streaming.Computed, 1)
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				in[0] = streaming.Float(xs[i%len(xs)])
				op.Eval(in, int64(i))
				i++
			})
			if allocs != 0 {
				t.Fatalf("Eval allocates %v times per event", allocs)
			}
		})
	}
}
