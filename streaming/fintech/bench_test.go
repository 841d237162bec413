package fintech

import (
	"testing"

	"github.com/tflo-io/tflo/streaming"
)

var sink streaming.Computed

// Every operator of the catalog, one Eval per op, in steady state.
func BenchmarkOperators(b *testing.B) {
	ticks := market(21, 4096)
	for _, c := range catalog[1:] { // rolling VWAP stands for both
		b.Run(c.name, func(b *testing.B) {
			op := c.make()
			lo, _ := op.(streaming.Arity).Arity()
			in := make([]streaming.Computed, lo)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				tk := ticks[i&4095]
				in[0] = streaming.Float(tk.p)
				if lo > 1 {
					in[1] = streaming.Float(tk.v)
				}
				sink = op.Eval(in, int64(i))
			}
		})
	}
}
