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
