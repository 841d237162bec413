package edge_test

import (
	"fmt"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/workers/edge"
)

// The per-sensor graph of the edge leg on its own: smoothing over 3
// readings, alarm at 25, clear at 20.
func ExampleNewGraph() {
	g, err := edge.NewGraph(3, 20, 25, 0)
	if err != nil {
		panic(err)
	}
	in := g.NewInstance()
	for i, v := range []float64{19, 21, 23, 30, 31, 29, 12, 11, 10} {
		in.Eval(int64(i), streaming.Float(v))
		if out := in.Output(0); !out.IsNone() {
			smooth, _ := in.Value("smooth")
			mode := edge.Cleared
			if out.Mode() == ops.Up {
				mode = edge.Raised
			}
			fmt.Printf("t=%d %s (smoothed %.1f)\n", i, mode, smooth.Float64())
		}
	}
	// Output:
	// t=4 raised (smoothed 28.0)
	// t=7 cleared (smoothed 17.3)
}
