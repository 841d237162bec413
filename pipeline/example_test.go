package pipeline_test

import (
	"context"
	"fmt"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// A pipeline written in Go: per sensor, the mean of the last 3 readings
// and an alarm when it reaches 25, evaluated in memory over four readings.
// Run(ctx, p, opts...) runs the same value on Kafka with checkpoints.
func Example() {
	p := pipeline.Pipeline{
		Name:   "boilers",
		Source: pipeline.KafkaSource{Brokers: []string{"localhost:9092"}, Topic: "readings"},
		Graph: pipeline.Graph{
			Inputs: []pipeline.Input{{Name: "value"}},
			Nodes: []pipeline.Node{
				{Name: "mean", Type: "sma", Inputs: []string{"value"}, Params: map[string]any{"window": 3}},
				{Name: "alarm", Type: "threshold_cross", Inputs: []string{"mean"}, Params: map[string]any{"threshold": 25}},
			},
		},
		Sinks: []pipeline.SinkSpec{pipeline.KafkaSink{Topic: "readings.mean"}},
	}
	var msgs []pipeline.Message
	for i, v := range []float64{20, 24, 28, 32} {
		msgs = append(msgs, pipeline.Message{Value: fmt.Appendf(nil, `{"sensor":"b-1","ts":%d,"value":%v}`, i, v)})
	}
	out := streaming.NewMemorySink()
	if _, err := pipeline.Evaluate(context.Background(), p, func(yield func(pipeline.Message) bool) {
		for _, m := range msgs {
			if !yield(m) {
				return
			}
		}
	}, out); err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range out.Outputs() {
		fmt.Printf("%s %s=%v mode=%d\n", o.Key, o.Name, o.Value, o.Mode)
	}
	// Output:
	// b-1 alarm=28 mode=1
}

// The same kind of pipeline as a YAML spec, with a dead end caught
// before anything runs: the error names the node and its line.
func ExampleParse() {
	_, err := pipeline.Parse([]byte(`name: boilers
source:
  kafka: {brokers: [localhost:9092], topic: readings}
graph:
  inputs: [value]
  nodes:
    - {name: mean, type: sma, inputs: [value], params: {window: 3}}
    - {name: alarm, type: threshold_crossing, inputs: [mean], params: {threshold: 25}}
`))
	fmt.Println(err)
	// Output:
	// pipeline spec: pipeline "boilers": graph node "alarm" (line 8): unknown operator type "threshold_crossing" (known: bollinger, deadband, ema, episode, hysteresis, ma_crossover, macd, median_despike, rate_of_change, rolling_max, rolling_min, rsi, sma, threshold_cross, vwap)
}

// delta is an operator of your own: each value minus the key's previous
// one. Its state is the previous value (a real operator saves it; see
// streaming/ops's Example_customOperator).
type delta struct {
	streaming.Base
	has  bool
	prev float64
}

func (*delta) Name() string { return "delta" }
func (d *delta) Reset()     { *d = delta{} }
func (d *delta) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	v := in[0].Float64()
	had, prev := d.has, d.prev
	d.has, d.prev = true, v
	if !had {
		return streaming.NoOutput()
	}
	return streaming.Float(v - prev)
}

// An operator type of your own, declared for a registry so that a spec
// names it (a type's Params, Inputs, Output and TypeVersion are what
// `worker --operators` lists). Registered in a registry of your own (or
// in DefaultRegistry at init), the spec is loaded with WithRegistry, and
// the pipeline it returns resolves its types there when it runs
// (Evaluate here, Run likewise).
func ExampleWithRegistry() {
	reg := pipeline.NewRegistry() // tflo's catalogs, and yours beside them
	reg.MustRegister(streaming.OperatorType{
		Name: "delta", Doc: "Each value minus the key's previous one.",
		MinInputs: 1, MaxInputs: 1, Inputs: "value", Output: "the difference, from the key's second value on",
		New: func(streaming.Params) (func() streaming.Operator, error) {
			return func() streaming.Operator { return &delta{} }, nil
		},
	})
	p, err := pipeline.Parse([]byte(`name: boilers
source:
  kafka: {brokers: [localhost:9092], topic: readings}
graph:
  inputs: [value]
  nodes:
    - {name: step, type: delta, inputs: [value]}
`), pipeline.WithRegistry(reg))
	if err != nil {
		fmt.Println(err)
		return
	}
	out := streaming.NewMemorySink()
	if _, err := pipeline.Evaluate(context.Background(), p, func(yield func(pipeline.Message) bool) {
		for i, v := range []float64{20, 24, 21} {
			if !yield(pipeline.Message{Value: fmt.Appendf(nil, `{"sensor":"b-1","ts":%d,"value":%v}`, i, v)}) {
				return
			}
		}
	}, out); err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range out.Outputs() {
		fmt.Printf("%s %s=%v\n", o.Key, o.Name, o.Value)
	}
	// Output:
	// b-1 step=4
	// b-1 step=-3
}
