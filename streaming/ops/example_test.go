package ops_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
)

// reading is one sensor record as an MQTT payload would carry it.
type reading struct {
	Sensor string
	TS     int64 // seconds
	Temp   float64
}

// Alarm is the caller's own mode type for the typed signal stream.
type Alarm string

// The iot-portal edge graph: smooth the temperature (SMA of 3), turn it
// into a High/Low mode with hysteresis (rise at 25, fall at 20), and
// confirm mode changes that hold for 2 seconds — a typed alarm stream, one
// graph instance per sensor.
func Example_edgeGraph() {
	g, err := streaming.NewBuilder().
		Input("temp").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(3) }, "temp").
		Node("mode", func() streaming.Operator { return ops.NewHysteresis(20, 25) }, "smooth").
		Node("alarm", func() streaming.Operator { return ops.NewThresholdCross(0.5, ops.OnMode(), ops.WithDwell(2)) }, "mode").
		Output("alarm").
		Build()
	if err != nil {
		panic(err)
	}
	records := slices.Values([]reading{
		{"boiler", 0, 19}, {"boiler", 1, 21}, {"boiler", 2, 23},
		{"attic", 2, 30},                     // another key: its own instance, still warming up
		{"boiler", 3, 30}, {"boiler", 4, 31}, // smooth 24.7, 28 → High from ts 4
		{"boiler", 5, math.NaN()},                                                   // bad reading: ignored, nothing changes
		{"boiler", 6, 29},                                                           // High held 2 s → raised
		{"boiler", 7, 12}, {"boiler", 8, 11}, {"boiler", 9, 10}, {"boiler", 10, 10}, // falls: Low from ts 8, confirmed at ts 10
	})
	signals := streaming.Flow(records, g, streaming.Binding[reading, Alarm, float64]{
		Key: func(r reading) string { return r.Sensor },
		Inputs: func(r reading, dst []streaming.Computed) int64 {
			dst[0] = streaming.Float(r.Temp)
			return r.TS
		},
		Signal: func(key string, ts int64, out *streaming.Instance) (streaming.Signal[Alarm, float64], bool) {
			c := out.Output(0)
			if c.IsNone() {
				return streaming.Signal[Alarm, float64]{}, false
			}
			smooth, _ := out.Value("smooth")
			mode := Alarm("cleared")
			if c.Mode() == ops.Up {
				mode = "raised"
			}
			return streaming.Signal[Alarm, float64]{Key: key, TS: ts, Mode: mode, Payload: smooth.Float64()}, true
		},
	})
	for s := range signals {
		fmt.Printf("%s t=%d %s (smoothed %.1f)\n", s.Key, s.TS, s.Mode, s.Payload)
	}
	// Output:
	// boiler t=6 raised (smoothed 30.0)
	// boiler t=10 cleared (smoothed 10.3)
}

// Integral is a custom operator: the time integral of its input by the
// trapezoid rule, in value·event-time units. It follows the catalog
// template of package ops — embed streaming.Base, declare arity, save a
// compact blob that starts with nothing configurable here, refuse bad
// blobs with *streaming.OperatorLoadError, never allocate in Eval.
type Integral struct {
	streaming.Base
	has    bool
	prev   float64
	prevTS int64
	total  float64
}

var (
	_ streaming.Operator = (*Integral)(nil)
	_ streaming.Arity    = (*Integral)(nil)
)

func (*Integral) Name() string        { return "integral" }
func (*Integral) TypeVersion() uint32 { return 1 }
func (*Integral) Arity() (int, int)   { return 1, 1 }
func (i *Integral) Reset()            { *i = Integral{} }

// Eval refuses NaN/±Inf, and a record whose area would make the total
// non-finite, with streaming.Rejected() (counted by the runtime, state
// unchanged); it ignores out-of-order records (no output) and emits the
// running integral from the second record on.
func (i *Integral) Eval(in []streaming.Computed, ts int64) streaming.NodeOutput {
	x := in[0].Float64()
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return streaming.Rejected()
	}
	if i.has && ts <= i.prevTS {
		return streaming.NoOutput()
	}
	if !i.has {
		i.has, i.prev, i.prevTS = true, x, ts
		return streaming.NoOutput()
	}
	total := i.total + (x/2+i.prev/2)*float64(ts-i.prevTS) // computed aside, kept only if finite
	if math.IsInf(total, 0) || math.IsNaN(total) {
		return streaming.Rejected()
	}
	i.total, i.prev, i.prevTS = total, x, ts
	return streaming.Float(i.total)
}

// Save writes has | prev | prevTS | total, 25 bytes little-endian.
func (i *Integral) Save() ([]byte, error) {
	b := make([]byte, 1, 25)
	if i.has {
		b[0] = 1
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(i.prev))
	b = binary.LittleEndian.AppendUint64(b, uint64(i.prevTS))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(i.total)), nil
}

func (i *Integral) Load(b []byte) error {
	if len(b) != 25 || b[0] > 1 {
		return &streaming.OperatorLoadError{Operator: i.Name(),
			Reason: fmt.Sprintf("blob of %d bytes, want 25", len(b)), Err: streaming.ErrCorrupt}
	}
	prev := math.Float64frombits(binary.LittleEndian.Uint64(b[1:]))
	total := math.Float64frombits(binary.LittleEndian.Uint64(b[17:]))
	for _, f := range []float64{prev, total} {
		if math.IsNaN(f) || math.IsInf(f, 0) { // a state Eval never makes
			return &streaming.OperatorLoadError{Operator: i.Name(),
				Reason: fmt.Sprintf("non-finite value %v", f), Err: streaming.ErrCorrupt}
		}
	}
	i.has, i.prev, i.total = b[0] == 1, prev, total
	i.prevTS = int64(binary.LittleEndian.Uint64(b[9:]))
	return nil
}

// Writing a custom operator and checkpointing it mid-stream: the restored
// instance continues where the first one stopped.
func Example_customOperator() {
	g, err := streaming.NewBuilder().
		Input("power_kw").
		Node("energy_kws", func() streaming.Operator { return &Integral{} }, "power_kw").
		Build()
	if err != nil {
		panic(err)
	}
	a := g.NewInstance()
	a.Eval(0, streaming.Float(2))
	a.Eval(10, streaming.Float(4)) // (2+4)/2·10 = 30
	fmt.Println("after 10 s:", a.Output(0))

	blob, _ := a.Save() // a checkpoint
	b := g.NewInstance()
	if err := b.Load(blob); err != nil {
		panic(err)
	}
	b.Eval(20, streaming.Float(4)) // + 40
	fmt.Println("after 20 s on the restored instance:", b.Output(0))
	b.Eval(30, streaming.Float(math.NaN())) // refused, counted
	fmt.Println("rejected:", b.Rejected(), "output:", b.Output(0))
	fmt.Println(g.Operators())
	// Output:
	// after 10 s: 30
	// after 20 s on the restored instance: 70
	// rejected: 1 output: none
	// [{energy_kws integral 1}]
}
