package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// smaSpec is the SMA-over-readings job with one node replaced by the
// test's.
func smaSpec(node string) string {
	return `name: sma-readings
source:
  kafka:
    brokers: [localhost:9092]
    topic: trades
graph:
  inputs: [value]
  nodes:
` + node + `
  outputs: [sma]
sinks:
  - kafka: {topic: readings.sma}
checkpoint:
  interval: 1s
`
}

const goodNode = `    - name: sma
      type: sma
      inputs: [value]
      params: {window: 10, warmup: partial}`

// mqttSpec is a job of an MQTT source (its keys on lines 4 to 6) and one
// SMA node (the graph from line 7, its nodes last).
const mqttSpec = `name: plant
source:
  mqtt:
    servers: [tcp://localhost:1883]
    topics: ["sensors/#"]
    dead_letter_topic: dlq/sensors
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3}}
`

// mqttPasswordSpec is mqttSpec with a password_env (line 7) and no
// username.
var mqttPasswordSpec = strings.Replace(mqttSpec, "dlq/sensors\n", "dlq/sensors\n    password_env: MQTT_PASSWORD\n", 1)

func TestParseSpec(t *testing.T) {
	p, err := pipeline.Parse([]byte(smaSpec(goodNode)))
	require.NoError(t, err)
	src, ok := p.Source.(*pipeline.KafkaSource)
	require.True(t, ok, "%T", p.Source)
	// Defaults come after the file: the dead-letter topic follows the
	// file's topic, the group the pipeline's name.
	require.Equal(t, "trades.dlq", src.DeadLetterTopic)
	require.Equal(t, "sma-readings", src.Group)
	require.Equal(t, time.Second, p.Checkpoint.Interval)
	require.Equal(t, pipeline.ByteSize(256<<20), p.State.Memory)
	require.Equal(t, []pipeline.Node{{Name: "sma", Type: "sma", Inputs: []string{"value"}, Params: map[string]any{"window": 10, "warmup": "partial"}, Line: 9}}, p.Graph.Nodes)
	// A Kafka sink publishes as JSON, with the publisher's buffer (to the
	// source's brokers: none of its own, so that an edit of the source's
	// reaches it).
	require.Equal(t, []pipeline.SinkSpec{pipeline.KafkaSink{Topic: "readings.sma", Format: pipeline.FormatJSON, MaxBuffered: kafka.DefaultMaxBuffered}}, p.Sinks)
}

// TestSpecErrorsNameTheNodeAndLine: each graph mistake names the node
// and the line that declared it.
func TestSpecErrorsNameTheNodeAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, node string
		want       []string
	}{
		{"unknown operator", `    - {name: sma, type: smaa, inputs: [value]}`,
			[]string{`graph node "sma" (line 9)`, `unknown operator type "smaa"`, "known: "}},
		{"unknown parameter", `    - {name: sma, type: sma, inputs: [value], params: {window: 10, windwo: 3}}`,
			[]string{`graph node "sma" (line 9)`, `parameter "windwo": unknown parameter (accepted: window, warmup)`}},
		{"mistyped parameter", `    - {name: sma, type: sma, inputs: [value], params: {window: ten}}`,
			[]string{`graph node "sma" (line 9)`, `parameter "window": want an int, got string ten`}},
		{"parameter out of bounds", `    - {name: sma, type: sma, inputs: [value], params: {window: 0}}`,
			[]string{`graph node "sma" (line 9)`, `parameter "window": 0 is below the minimum 1`}},
		{"every parameter problem of a node", `    - {name: sma, type: sma, inputs: [value], params: {window: 0, warmup: partal, size: 3}}`,
			[]string{
				`graph node "sma" (line 9): operator "sma": parameter "size": unknown parameter (accepted: window, warmup)`,
				`graph node "sma" (line 9): operator "sma": parameter "window": 0 is below the minimum 1`,
				`graph node "sma" (line 9): operator "sma": parameter "warmup": "partal" is not one of full, partial`,
			}},
		{"unknown input", `    - {name: sma, type: sma, inputs: [valeu], params: {window: 3}}`,
			[]string{`graph node "sma" (line 9)`, `unknown input "valeu"`}},
		{"cycle", `    - {name: a, type: sma, inputs: [sma], params: {window: 3}}
    - {name: sma, type: sma, inputs: [a], params: {window: 3}}`,
			[]string{`graph node "a" (line 9)`, `is part of a cycle: "a" -> "sma" -> "a"`}},
		{"too many inputs", `    - {name: sma, type: sma, inputs: [value, value], params: {window: 3}}`,
			[]string{`graph node "sma" (line 9)`, `operator "sma" takes 1 input (value), wired with 2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.Parse([]byte(smaSpec(tc.node)))
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestSpecNamesTheNodeOfEachRefusalOfNew: an operator type whose New
// refuses several parameters at once has each refusal reported on its
// own line, naming the node and its line. Bug: the registry kept the
// first refusal and dropped the others.
func TestSpecNamesTheNodeOfEachRefusalOfNew(t *testing.T) {
	reg := pipeline.NewRegistry()
	require.NoError(t, reg.Register(streaming.OperatorType{
		Name: "band", Doc: "a band", MinInputs: 1, MaxInputs: 1, Output: "float",
		Params: []streaming.Param{
			{Name: "low", Kind: streaming.ParamFloat, Doc: "the low edge"},
			{Name: "high", Kind: streaming.ParamFloat, Doc: "the high edge"},
		},
		New: func(p streaming.Params) (func() streaming.Operator, error) {
			var errs []error
			if p.Float("low") < 0 {
				errs = append(errs, &streaming.ParamError{Param: "low", Reason: "must not be negative"})
			}
			if p.Float("high") > 100 {
				errs = append(errs, &streaming.ParamError{Param: "high", Reason: "must not exceed 100"})
			}
			return func() streaming.Operator { return nil }, errors.Join(errs...)
		},
	}))
	_, err := pipeline.Parse([]byte(smaSpec(`    - {name: sma, type: band, inputs: [value], params: {low: -1, high: 200}}`)), pipeline.WithRegistry(reg))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 2, "one line a refusal: %v", err)
	require.True(t, strings.HasSuffix(lines[0], `graph node "sma" (line 9): operator "band": parameter "low": must not be negative`), lines[0])
	require.Equal(t, `graph node "sma" (line 9): operator "band": parameter "high": must not exceed 100`, lines[1])
}

// bandOp says whether its value is outside [0, 100] (mode 1) or not.
type bandOp struct{ streaming.Base }

func (bandOp) Name() string { return "band" }
func (bandOp) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	if v := in[0].Float64(); v < 0 || v > 100 {
		return streaming.Sig(1, v)
	}
	return streaming.Sig(0, in[0].Float64())
}

// TestSpecRemembersItsRegistry: a spec loaded with WithRegistry resolves
// its operator types in that registry when it runs, unless told another.
// Bug: Parse accepted a type of the user's registry and then Evaluate,
// SinkEnv and Run refused the same pipeline ('unknown operator type
// "band"', naming the spec's line, the known list DefaultRegistry's).
func TestSpecRemembersItsRegistry(t *testing.T) {
	reg := pipeline.NewRegistry()
	require.NoError(t, reg.Register(streaming.OperatorType{
		Name: "band", Doc: "a band", MinInputs: 1, MaxInputs: 1, Output: "mode",
		Modes: map[streaming.Mode]string{0: "in", 1: "out"},
		New: func(streaming.Params) (func() streaming.Operator, error) {
			return func() streaming.Operator { return bandOp{} }, nil
		},
	}))
	p, err := pipeline.Parse([]byte(smaSpec(`    - {name: sma, type: band, inputs: [value]}`)), pipeline.WithRegistry(reg))
	require.NoError(t, err)
	env, err := p.SinkEnv(nil)
	require.NoError(t, err)
	require.Equal(t, map[streaming.Mode]string{0: "in", 1: "out"}, env.ModesOf("sma"))
	_, err = p.SinkEnv(streaming.NewRegistry())
	require.ErrorContains(t, err, `unknown operator type "band"`, "a registry given explicitly is the one used")
}

// TestSpecStrictKeys: unknown keys are refused with their path and line,
// all of a file's problems at once, including inside unions.
func TestSpecStrictKeys(t *testing.T) {
	src := strings.Replace(smaSpec(goodNode), "    topic: trades\n", "    topic: trades\n    topik: x\n", 1)
	src = strings.Replace(src, "  interval: 1s\n", "  interval: soon\n", 1)
	src = strings.Replace(src, "  - kafka: {topic: readings.sma}\n", "  - kafka: {topic: readings.sma, formt: json}\n", 1)
	src += "decoder: {json: {key: symbol, tme: ts}}\n"
	_, err := pipeline.Parse([]byte(src))
	require.Error(t, err)
	for _, w := range []string{
		"4 problems",
		"line 6: source.kafka.topik: unknown key",
		"line 16: sinks[0].kafka.formt: unknown key",
		`line 18: checkpoint.interval: "soon" is not a duration`,
		"line 19: decoder.json.tme: unknown key (known here: key, time)",
	} {
		require.Contains(t, err.Error(), w)
	}
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "decoder: protobuf\n"))
	require.ErrorContains(t, err, `line 18: decoder: unknown decoder "protobuf" (known: reading, json, signal_envelope`)
	// An unknown decoder is one of the problems, not found only once the
	// others are fixed.
	src = strings.Replace(smaSpec(goodNode), "topic:", "topik:", 1) + "decoder: {protobuf: {schema: x}}\n"
	_, err = pipeline.Parse([]byte(src))
	require.ErrorContains(t, err, "2 problems")
	require.ErrorContains(t, err, "line 5: source.kafka.topik: unknown key")
	require.ErrorContains(t, err, `line 18: decoder: unknown decoder "protobuf"`)
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "decoder: json\n"))
	require.ErrorContains(t, err, "line 18: decoder: json needs its key and time fields")
	// A json decoder with only one of its settings is refused at its
	// line, naming the one left out. Bug: the spec was accepted and the
	// pipeline then failed with "the json decoder needs the key and time
	// fields", naming neither the line nor the missing setting.
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "decoder: {json: {key: k}}\n"))
	require.ErrorContains(t, err, "line 18: decoder: json needs its time field")
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "decoder: {json: {time: t}}\n"))
	require.ErrorContains(t, err, "line 18: decoder: json needs its key field")
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "decoder: {json: {}}\n"))
	require.ErrorContains(t, err, "line 18: decoder: json needs its key and time fields")
	_, err = pipeline.JSONDecoder{Key: "k"}.BindInputs([]string{"value"})
	require.ErrorContains(t, err, "the json decoder needs its time field")
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "sinks:\n  - {}\n"))
	require.ErrorContains(t, err, "repeated key")
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "  - kafka: {topic: readings.sma}\n", "  - {influx: {url: x, bucket: y}, archive: {dir: z}}\n", 1)))
	require.ErrorContains(t, err, "line 15: sinks[0]: give exactly one of kafka, influx, archive") // and any registered
	// A problem of a section is at the section's key, not at the first
	// value written under it.
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "  inputs: [value]\n", "", 1)))
	require.ErrorContains(t, err, "line 6: graph.inputs is empty")
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "    brokers: [localhost:9092]\n", "", 1)))
	require.ErrorContains(t, err, "line 3: source.kafka.brokers is empty")
}

// TestSpecArchiveSink: the archive sink's codec, zstd unless the spec
// says snappy (anything else is refused with its line), and its file
// size and age, the writer's defaults unless set.
func TestSpecArchiveSink(t *testing.T) {
	archive := func(extra string) []byte {
		return []byte(strings.Replace(smaSpec(goodNode), "  - kafka: {topic: readings.sma}\n", "  - archive: {dir: /tmp/a"+extra+"}\n", 1))
	}
	p, err := pipeline.Parse(archive(""))
	require.NoError(t, err)
	require.Equal(t, pipeline.ArchiveSink{Dir: "/tmp/a", TargetFileSize: parquet.DefaultTargetFileSize, MaxFileAge: parquet.DefaultMaxFileAge, Compression: parquet.Zstd}, p.Sinks[0])
	p, err = pipeline.Parse(archive(", target_file_size: 1MiB, max_file_age: 30s"))
	require.NoError(t, err)
	require.Equal(t, pipeline.ArchiveSink{Dir: "/tmp/a", TargetFileSize: 1 << 20, MaxFileAge: 30 * time.Second}, p.Sinks[0])
	p, err = pipeline.Parse(archive(", compression: snappy"))
	require.NoError(t, err)
	require.Equal(t, parquet.Snappy, p.Sinks[0].(pipeline.ArchiveSink).Compression)
	_, err = pipeline.Parse(archive(", compression: lz4"))
	require.ErrorContains(t, err, `line 15: sinks[0].archive.compression: compression "lz4" is not one the archive writes (zstd or snappy)`)
}

// TestLoadReadsTheEnvironment: ${NAME} references and TFLO_* overrides,
// then defaults derived from the overridden values.
func TestLoadReadsTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sma.yaml")
	src := strings.Replace(smaSpec(goodNode), "brokers: [localhost:9092]", "brokers: [\"${TEST_BROKERS:-localhost:9092}\"]", 1)
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	t.Setenv("TEST_BROKERS", "kafka:9092")
	t.Setenv("TFLO_SOURCE_KAFKA_TOPIC", "quotes")
	t.Setenv("TFLO_STATE_DIR", "/var/lib/tflo")
	p, err := pipeline.Load(path)
	require.NoError(t, err)
	src2 := p.Source.(*pipeline.KafkaSource)
	require.Equal(t, []string{"kafka:9092"}, src2.Brokers)
	require.Equal(t, "quotes", src2.Topic)
	require.Equal(t, "quotes.dlq", src2.DeadLetterTopic)
	require.Equal(t, "/var/lib/tflo", p.State.Dir)

	_, err = pipeline.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "missing.yaml")
}

func TestValidateSentences(t *testing.T) {
	err := pipeline.Pipeline{Name: "bad name", Source: pipeline.MQTTSource{Topics: []string{"sensors/#"}, DeadLetterTopic: "sensors/dlq"},
		Graph: pipeline.Graph{Inputs: []pipeline.Input{{Name: "value"}}}}.Validate()
	require.Error(t, err)
	for _, w := range []string{"the name must be", "source.mqtt.servers is empty", `dead_letter_topic "sensors/dlq" matches the subscription "sensors/#"`, "graph has no nodes"} {
		require.Contains(t, err.Error(), w)
	}
}

// TestSpecMaxCheckpointAge: checkpoint.max_checkpoint_age is how long a
// worker goes without a coordinator round before it checkpoints on its
// own; it defaults to three intervals and may not be negative.
func TestSpecMaxCheckpointAge(t *testing.T) {
	p, err := pipeline.Parse([]byte(smaSpec(goodNode)))
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, p.WithDefaults().Checkpoint.MaxCheckpointAge, "default: three intervals")
	p, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "interval: 1s", "interval: 1s\n  max_checkpoint_age: 5s", 1)))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, p.Checkpoint.MaxCheckpointAge)
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "interval: 1s", "interval: 1s\n  max_checkpoint_age: -5s", 1)))
	require.ErrorContains(t, err, "line 18: checkpoint.max_checkpoint_age -5s must not be negative")
}

// TestSpecValuesOutOfRange: a value the decoder takes but the pipeline
// cannot run with is refused naming its key path, and its line when the
// file set it (not a default derived from it), together with the graph's
// problems: every problem of the spec at once, from Parse and from Load.
func TestSpecValuesOutOfRange(t *testing.T) {
	src := strings.Replace(smaSpec(strings.Replace(goodNode, "window: 10", "windo: 10", 1)), "  interval: 1s\n", "  interval: -1s\n  stage_timeout: -2s\n", 1)
	src = strings.Replace(src, "    topic: trades\n", "    topic: trades\n    revoke_timeout: -5s\n", 1)
	src = strings.Replace(src, "  - kafka: {topic: readings.sma}\n", "  - kafka: {topic: readings.sma}\n  - influx: {url: http://localhost:8086, bucket: b, tls: {cert_file: /c.pem}}\n", 1)
	src += "state:\n  max_keys: -2\n  memory: 10KiB\n"
	lineOf := func(key string) int {
		for i, l := range strings.Split(src, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), key+":") || strings.Contains(l, "- name: "+key) {
				return i + 1
			}
		}
		t.Fatalf("no %s in the spec", key)
		return 0
	}
	want := []string{
		fmt.Sprintf("line %d: source.kafka.revoke_timeout -5s must not be negative", lineOf("revoke_timeout")),
		fmt.Sprintf("line %d: checkpoint.interval -1s must not be negative", lineOf("interval")),
		fmt.Sprintf("line %d: checkpoint.stage_timeout -2s must not be negative", lineOf("stage_timeout")),
		fmt.Sprintf("line %d: state.max_keys -2 must be positive (-1: no cap)", lineOf("max_keys")),
		fmt.Sprintf("line %d: state.memory 10KiB is below the minimum 80MiB", lineOf("memory")),
		fmt.Sprintf(`graph node "sma" (line %d): operator "sma": parameter "windo": unknown parameter`, lineOf("sma")),
		// A section's problem: the line of its first value.
		fmt.Sprintf("line %d: sinks[1]: influx sink http://localhost:8086: tls: a client certificate needs both cert_file and key_file", lineOf("- influx")),
	}
	file := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(file, []byte(src), 0o600))
	_, perr := pipeline.Parse([]byte(src))
	_, lerr := pipeline.Load(file)
	for _, err := range []error{perr, lerr} {
		require.Error(t, err)
		for _, w := range want {
			require.Contains(t, err.Error(), w)
		}
		require.NotContains(t, err.Error(), "max_checkpoint_age", "derived from the interval, not set: not blamed")
		require.NotContains(t, err.Error(), "must exceed revoke_timeout", "a negative timeout is refused as itself")
	}
	require.True(t, strings.HasPrefix(lerr.Error(), file+": "), lerr.Error())

	// Set by a variable: the variable, and no line.
	t.Setenv("TFLO_CHECKPOINT_HEARTBEAT_TIMEOUT", "-3s")
	_, err := pipeline.Load(file)
	require.ErrorContains(t, err, `pipeline "sma-readings": environment TFLO_CHECKPOINT_HEARTBEAT_TIMEOUT: checkpoint.heartbeat_timeout -3s must not be negative`)
}

// TestSpecDeadLetterSink: dead_letter names the sink of a Kafka source's
// dead letters, in place of source.kafka.dead_letter_topic; what cannot
// take dead letters is refused, naming the line (format and envelope are
// not its keys: a dead letter is the record as it came).
func TestSpecDeadLetterSink(t *testing.T) {
	spec := smaSpec(goodNode)
	p, err := pipeline.Parse([]byte(spec + "dead_letter:\n  kafka: {topic: trades.bad, brokers: [other:9092]}\n"))
	require.NoError(t, err)
	require.Equal(t, pipeline.KafkaSink{Topic: "trades.bad", Brokers: []string{"other:9092"}, MaxBuffered: kafka.DefaultMaxBuffered}, p.DeadLetter)
	require.Empty(t, p.Source.(*pipeline.KafkaSource).DeadLetterTopic, "no default topic beside the sink")

	for name, c := range map[string]struct{ spec, want string }{
		"format":       {spec + "dead_letter:\n  kafka: {topic: trades.bad, format: json}\n", "line 19: dead_letter.kafka.format: unknown key (known here: brokers, topic, security, max_buffered)"},
		"empty":        {spec + "dead_letter: {}\n", "line 18: dead_letter: give kafka"},
		"both":         {strings.Replace(spec, "topic: trades", "topic: trades\n    dead_letter_topic: trades.dlq", 1) + "dead_letter:\n  kafka: {topic: trades.bad}\n", `source.kafka.dead_letter_topic "trades.dlq" and dead_letter are both set`},
		"read back":    {spec + "dead_letter:\n  kafka: {topic: trades}\n", `dead_letter: kafka topic "trades" is the consumed topic`},
		"same brokers": {spec + "dead_letter:\n  kafka: {topic: trades, brokers: [localhost:9092]}\n", `dead_letter: kafka topic "trades" is the consumed topic`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pipeline.Parse([]byte(c.spec))
			require.ErrorContains(t, err, c.want)
		})
	}

	p.DeadLetter = pipeline.InfluxSink{URL: "http://localhost:8086", Bucket: "b"}
	require.ErrorContains(t, p.Validate(), "dead_letter: a pipeline.InfluxSink does not take dead letters")
	mq := pipeline.Pipeline{Name: "edge", Source: pipeline.MQTTSource{Servers: []string{"tcp://localhost:1883"}, Topics: []string{"sensors/+"}, DeadLetterTopic: "dlq"},
		Graph: p.Graph, DeadLetter: pipeline.KafkaSink{Brokers: []string{"localhost:9092"}, Topic: "bad"}}
	require.ErrorContains(t, mq.WithDefaults().Validate(), `source.mqtt.dead_letter_topic "dlq" and dead_letter are both set`)
	mq.Source = pipeline.MQTTSource{Servers: []string{"tcp://localhost:1883"}, Topics: []string{"sensors/+"}}
	require.NoError(t, mq.WithDefaults().Validate(), "an MQTT source's dead letters may go to a sink instead of a topic")
	mq.DeadLetter = nil
	require.ErrorContains(t, mq.WithDefaults().Validate(), "source.mqtt.dead_letter_topic is empty: malformed payloads need a destination")
}

// TestSpecCheckRefusesWhatOpeningWould: what a sink would refuse when it
// opens, and can be known without connecting, is refused when the spec
// is loaded (what worker --check runs): an archive behind a source whose
// offsets do not replay or with no location, or whose file size or age
// the writer refuses (a negative max_file_age was the default, a
// target_file_size over 5GiB failed only when the worker started), a
// Kafka sink with no topic or no brokers to use or a negative
// max_buffered (it was the default), an Influx sink whose url is not one.
func TestSpecCheckRefusesWhatOpeningWould(t *testing.T) {
	mqttArchive := mqttSpec + `sinks:
  - archive: {dir: /var/tflo/archive}
`
	_, err := pipeline.Parse([]byte(mqttArchive))
	require.ErrorContains(t, err, "line 12: sinks[0]: archive sink: the archive needs a source whose offsets replay (kafka); the mqtt source has none")
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "  - kafka: {topic: readings.sma}\n", "  - archive: {target_file_size: 1MiB}\n", 1)))
	require.ErrorContains(t, err, "line 15: sinks[0]: archive sink: give exactly one of dir")
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "  - kafka: {topic: readings.sma}\n", "  - archive: {dir: /tmp/a, target_file_size: 6GiB}\n  - archive: {dir: /tmp/b, max_file_age: -5m}\n", 1)))
	require.ErrorContains(t, err, "line 15: sinks[0]: archive sink: target_file_size 6GiB must be between 1 byte and 5GiB")
	require.ErrorContains(t, err, "line 16: sinks[1]: archive sink: max_file_age -5m0s must not be negative")
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "  - kafka: {topic: readings.sma}\n", "  - kafka: {format: json}\n  - influx: {url: influxdb:8086, bucket: b}\n", 1)))
	require.ErrorContains(t, err, "line 15: sinks[0]: kafka sink: topic is empty")
	require.ErrorContains(t, err, `line 16: sinks[1]: influx sink: url "influxdb:8086" is not http://host:port or https://host:port`)
	mqttKafka := strings.Replace(mqttArchive, "  - archive: {dir: /var/tflo/archive}\n", "  - kafka: {topic: plant.sma}\n", 1)
	_, err = pipeline.Parse([]byte(mqttKafka))
	require.ErrorContains(t, err, `line 12: sinks[0]: kafka sink "plant.sma": brokers is empty (only a Kafka source lends its brokers)`)
	// A negative buffer was the default buffer.
	_, err = pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "{topic: readings.sma}", "{topic: readings.sma, max_buffered: -5}", 1) + "dead_letter:\n  kafka: {topic: trades.bad, max_buffered: -1}\n"))
	require.ErrorContains(t, err, `line 15: sinks[0]: kafka sink "readings.sma": max_buffered -5 must not be negative`)
	require.ErrorContains(t, err, `line 18: dead_letter: kafka sink "trades.bad": max_buffered -1 must not be negative`)
}

// TestSpecRefusesAnOutputSinkToTheConsumedTopic: a Kafka sink publishing
// to the topic the source consumes, on its cluster, fed the pipeline its
// own outputs (dead letters, or a loop without end); it is refused as a
// dead-letter sink to that topic is. Another cluster's topic of the same
// name is not the consumed one.
func TestSpecRefusesAnOutputSinkToTheConsumedTopic(t *testing.T) {
	for _, sink := range []string{"{topic: trades}", "{topic: trades, brokers: [localhost:9092]}"} {
		_, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "{topic: readings.sma}", sink, 1)))
		require.ErrorContains(t, err, `line 15: sinks[0]: kafka topic "trades" is the consumed topic: outputs would be read back`, sink)
	}
	_, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "{topic: readings.sma}", "{topic: trades, brokers: [other:9092]}", 1)))
	require.NoError(t, err)
}

// TestSpecCheckRefusesADeadLetterSinkOpeningWould: the dead-letter sink's
// problems that its opening would find (no topic, no brokers behind an
// MQTT source, bad security) are refused when the spec is loaded, naming
// dead_letter and its line; before, the spec passed `worker --check` and
// the worker failed to start.
func TestSpecCheckRefusesADeadLetterSinkOpeningWould(t *testing.T) {
	mqttDeadLetter := strings.Replace(mqttSpec, "    dead_letter_topic: dlq/sensors\n", "", 1) + `dead_letter:
  kafka: {topic: plant.bad}
`
	_, err := pipeline.Parse([]byte(mqttDeadLetter))
	require.ErrorContains(t, err, `line 10: dead_letter: kafka sink "plant.bad": brokers is empty (only a Kafka source lends its brokers)`)
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "dead_letter:\n  kafka: {topic: \"\"}\n"))
	require.ErrorContains(t, err, "line 18: dead_letter: kafka sink: topic is empty")
	_, err = pipeline.Parse([]byte(smaSpec(goodNode) + "dead_letter:\n  kafka: {topic: trades.bad, security: {sasl: {mechanism: nope}}}\n"))
	require.ErrorContains(t, err, `line 18: dead_letter: kafka sink "trades.bad": security: kafka security: SASL mechanism "nope" is not one of`)
	_, err = pipeline.Parse([]byte(strings.Replace(mqttDeadLetter, "{topic: plant.bad}", "{topic: plant.bad, brokers: [k:9092]}", 1)))
	require.NoError(t, err)
}

// A spec's dead_letter.kafka and the KafkaSink it declares convert into
// each other without losing a field: every field of DeadLetterKafka is
// set, and comes back.
func TestDeadLetterKafkaRoundTrip(t *testing.T) {
	d := pipeline.DeadLetterKafka{
		Brokers:     []string{"k1:9092", "k2:9092"},
		Topic:       "dlq",
		Security:    &kafka.Security{TLS: &kafka.TLSConfig{CAFile: "ca.pem"}},
		MaxBuffered: 7,
	}
	v := reflect.ValueOf(d)
	for i := range v.NumField() {
		require.False(t, v.Field(i).IsZero(), "set DeadLetterKafka.%s in this test", v.Type().Field(i).Name)
	}
	require.Equal(t, d, pipeline.DeadLetterKafkaOf(pipeline.DeadLetterKafkaSink(d)))
}

// TestEmptyVariableLeavesAPointerDefault: a TFLO_* variable set to ""
// clears its key, so its default applies, for the keys whose default is
// true too. Bug: an empty TFLO_SOURCE_MQTT_ACK_ON_CHECKPOINT (a blank
// line of an env file) turned acknowledgement on checkpoint off, and an
// empty TFLO_SOURCE_MQTT_REQUIRE_TOPIC_MATCH made a Kafka spec grow an
// mqtt source ("give kafka or mqtt, not both").
func TestEmptyVariableLeavesAPointerDefault(t *testing.T) {
	write := func(src string) string {
		path := filepath.Join(t.TempDir(), "spec.yaml")
		require.NoError(t, os.WriteFile(path, []byte("name: p\nsource:\n  "+src+`
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 10}}
`), 0o600))
		return path
	}
	t.Setenv("TFLO_SOURCE_MQTT_ACK_ON_CHECKPOINT", "")
	t.Setenv("TFLO_SOURCE_MQTT_REQUIRE_TOPIC_MATCH", "")
	p, err := pipeline.Load(write(`mqtt: {servers: ["mqtt://127.0.0.1:1883"], topics: ["sensors/#"], dead_letter_topic: dlq}`))
	require.NoError(t, err)
	src := p.Source.(*pipeline.MQTTSource)
	require.True(t, *src.AckOnCheckpoint, "ack_on_checkpoint: an empty variable leaves the default, true")
	require.True(t, *src.RequireTopicMatch, "require_topic_match: an empty variable leaves the default, true")

	p, err = pipeline.Load(write(`kafka: {brokers: ["127.0.0.1:9092"], topic: readings}`))
	require.NoError(t, err, "an empty variable of a section the spec does not have creates none")
	require.IsType(t, &pipeline.KafkaSource{}, p.Source)
}

// TestEnvelopeNamesOutputsOfTheGraph: a signal envelope's trigger, or a
// payload field's from, that names no output of the graph was taken, and
// the sink published no signal (or never that field); it is refused,
// naming the sink, the name and the graph's outputs.
func TestEnvelopeNamesOutputsOfTheGraph(t *testing.T) {
	p, err := pipeline.Parse([]byte(smaSpec(goodNode)))
	require.NoError(t, err)
	env, err := p.SinkEnv(nil)
	require.NoError(t, err)
	enc := func(e pipeline.Envelope) error {
		_, err := pipeline.KafkaSink{Topic: "signals", Format: pipeline.FormatSignalEnvelope, Envelope: &e}.Encoder(env)
		return err
	}
	require.NoError(t, enc(pipeline.Envelope{Trigger: "sma", Payload: []pipeline.PayloadField{{Name: "mean", From: "sma"}, {Name: "topic", From: "$topic"}}}))
	require.EqualError(t, enc(pipeline.Envelope{Trigger: "smaa"}), `kafka sink "signals": envelope.trigger "smaa" is not an output of the graph [sma]`)
	require.EqualError(t, enc(pipeline.Envelope{Trigger: "sma", Payload: []pipeline.PayloadField{{Name: "raw", From: "value"}}}),
		`kafka sink "signals": envelope payload field "raw" is from "value", not an output of the graph [sma] (or $topic)`)
}

// TestEnvelopePayloadFieldNamedTwiceIsRefused: two payload fields of one
// name were taken, and every envelope carried the name twice in its
// payload object, of which readers (the signal_envelope decoder,
// encoding/json) keep only the last: the first field's value never
// reached them. It is refused, naming the field.
func TestEnvelopePayloadFieldNamedTwiceIsRefused(t *testing.T) {
	_, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "{topic: readings.sma}",
		"{topic: x, format: signal_envelope, envelope: {trigger: sma, payload: [{name: v, from: sma}, {name: t, from: $topic}, {name: v, from: $topic}]}}", 1)))
	require.ErrorContains(t, err, `line 15: sinks[0]: kafka sink "x": envelope payload field "v" is named twice`)
}

// TestSpecCheckRefusesWhatAKafkaSinkEncoderWould: a Kafka sink's format
// or envelope that its encoder refuses (an unknown format, an envelope
// beside format json, a trigger naming no output) passed the spec check
// (`worker --check`) and failed only when the worker opened the sink; it
// is refused when the spec is loaded, naming the sink's line.
func TestSpecCheckRefusesWhatAKafkaSinkEncoderWould(t *testing.T) {
	for sink, want := range map[string]string{
		"{topic: x, format: xml}":                                        `line 15: sinks[0]: kafka sink "x": format "xml" is neither json nor signal_envelope`,
		"{topic: x, envelope: {trigger: sma}}":                           `line 15: sinks[0]: kafka sink "x": envelope is only for format signal_envelope`,
		"{topic: x, format: signal_envelope, envelope: {trigger: smaa}}": `line 15: sinks[0]: kafka sink "x": envelope.trigger "smaa" is not an output of the graph [sma]`,
	} {
		_, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "{topic: readings.sma}", sink, 1)))
		require.ErrorContains(t, err, want, sink)
	}
	_, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "{topic: readings.sma}", "{topic: x, format: signal_envelope, envelope: {trigger: sma}}", 1)))
	require.NoError(t, err)
}

// TestRepeatedGraphOutputIsRefused: a graph output listed twice was
// taken, and every value of it was written to the sinks twice (two
// records per emission on a Kafka topic, two rows in the archive); it is
// refused, naming the output.
func TestRepeatedGraphOutputIsRefused(t *testing.T) {
	_, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "outputs: [sma]", "outputs: [sma, value, sma]", 1)))
	require.ErrorContains(t, err, `graph output "sma" is repeated`)

	p, err := pipeline.Parse([]byte(smaSpec(goodNode)))
	require.NoError(t, err)
	p.Graph.Outputs = []string{"sma", "sma"}
	msgs := func(yield func(pipeline.Message) bool) {
		yield(pipeline.Message{Topic: "trades", Value: []byte(`{"sensor":"s-1","ts":1,"value":2}`)})
	}
	out := streaming.NewMemorySink()
	_, err = pipeline.Evaluate(context.Background(), p, msgs, out)
	require.ErrorContains(t, err, `graph output "sma" is repeated`)
	require.Empty(t, out.Outputs())
}

// TestRepeatedGraphNameIsReportedOnce: a graph input or output listed
// three times was reported twice, and the repeated inputs once more by
// the decoder ("the graph reads [value value value]"); each repeated name
// is reported once, and the decoder says nothing of it.
func TestRepeatedGraphNameIsReportedOnce(t *testing.T) {
	src := strings.Replace(smaSpec(goodNode), "outputs: [sma]", "outputs: [sma, sma, sma]", 1)
	src = strings.Replace(src, "inputs: [value]\n  nodes", "inputs: [value, value, value]\n  nodes", 1)
	require.Contains(t, src, "[value, value, value]")
	_, err := pipeline.Parse([]byte(src))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 2, "one line a repeated name: %v", err)
	require.ErrorContains(t, err, `graph input "value" is empty or repeated`)
	require.ErrorContains(t, err, `graph output "sma" is repeated`)
}

// TestSpecReportsEveryProblemAtOnce: a spec's problems were reported one
// stage at a time (a sink entry naming two types hid everything else;
// once fixed, the values out of range and the graph; then the Kafka
// sinks' formats; then the decoder's inputs), so a spec was fixed over
// as many runs. Every problem is now reported at once, each naming its
// key or node and its line, and a sink entry that could not be made
// keeps its place: the next sink's problem names its own index.
func TestSpecReportsEveryProblemAtOnce(t *testing.T) {
	src := `name: sma-readings
source:
  kafka:
    brokers: [localhost:9092]
    topic: trades
graph:
  inputs: [price]
  nodes:
    - {name: sma, type: sma, inputs: [price], params: {window: 10}}
  outputs: [sma]
sinks:
  - {kafka: {topic: a}, influx: {url: http://localhost:8086, bucket: b}}
  - kafka: {topic: readings.sma, format: xml}
checkpoint:
  interval: -1s
`
	want := []string{
		"line 12: sinks[0]: give exactly one of kafka, influx, archive",
		`line 13: sinks[1]: kafka sink "readings.sma": format "xml" is neither json nor signal_envelope`,
		"line 15: checkpoint.interval -1s must not be negative",
		`decoder: the reading decoder fills one input from the field "value", the graph reads ["price"]`,
	}
	_, err := pipeline.Parse([]byte(src))
	require.Error(t, err)
	for _, w := range want {
		require.ErrorContains(t, err, w)
	}
	require.Len(t, strings.Split(err.Error(), "\n"), len(want), "one line a problem, nothing twice: %v", err)

	// A graph's problems come with the rest as well, and no source is
	// reported once, as the section's problem.
	src = strings.Replace(src, "{window: 10}", "{windo: 10}", 1)
	src = strings.Replace(src, "source:\n  kafka:\n    brokers: [localhost:9092]\n    topic: trades\n", "source: {}\n", 1)
	_, err = pipeline.Parse([]byte(src))
	require.ErrorContains(t, err, "sinks[0]: give exactly one of")
	require.ErrorContains(t, err, `graph node "sma" (line 6): operator "sma": parameter "windo": unknown parameter`)
	require.ErrorContains(t, err, "checkpoint.interval -1s must not be negative")
	require.ErrorContains(t, err, "source: give kafka or mqtt")
	require.NotContains(t, err.Error(), "no source")
}

// TestSpecRefusesAnMQTTGraphOfSeveralInputs: an MQTT source gives one
// value per reading, so a graph of several inputs behind one could
// never run; the spec's check (worker --check) passed it and the worker
// failed only when it opened the source, with no key or line. It is
// refused when the spec is loaded, naming graph.inputs and its line.
func TestSpecRefusesAnMQTTGraphOfSeveralInputs(t *testing.T) {
	spec := `name: plant
source:
  mqtt:
    servers: [tcp://localhost:1883]
    topics: ["sensors/#"]
    dead_letter_topic: dlq/sensors
decoder: {json: {key: sensor, time: ts}}
graph:
  inputs: [temp, hum]
  nodes:
    - {name: t, type: sma, inputs: [temp], params: {window: 3}}
    - {name: h, type: sma, inputs: [hum], params: {window: 3}}
`
	_, err := pipeline.Parse([]byte(spec))
	require.ErrorContains(t, err, `line 9: graph.inputs: an MQTT source gives one value per reading; the graph reads 2 inputs [temp hum]`)
	_, err = pipeline.Parse([]byte(strings.Replace(strings.Replace(spec, "[temp, hum]", "[temp]", 1), "    - {name: h, type: sma, inputs: [hum], params: {window: 3}}\n", "", 1)))
	require.NoError(t, err)
}

// TestSpecRefusesAnMQTTServerTheSourceCannotDial: "host:port" (read as
// scheme "host"), a URL without a host or another scheme passed the
// spec's check (worker --check) and failed only when the worker opened
// the source. The check refuses it, naming the server and its line.
func TestSpecRefusesAnMQTTServerTheSourceCannotDial(t *testing.T) {
	spec := func(server string) []byte {
		return []byte(`name: plant
source:
  mqtt:
    servers: [tcp://localhost:1883, ` + server + `]
    topics: ["sensors/#"]
    dead_letter_topic: dlq/sensors
graph:
  inputs: [value]
  nodes:
    - {name: t, type: sma, inputs: [value], params: {window: 3}}
`)
	}
	for server, want := range map[string]string{
		"mosquitto:1883":     `line 4: source.mqtt.servers[1]: server URL "mosquitto:1883": want mqtt://host:port`,
		"http://broker:1883": `line 4: source.mqtt.servers[1]: server URL "http://broker:1883": scheme "http" is not mqtt`,
		"mqtt://":            `line 4: source.mqtt.servers[1]: server URL "mqtt:": want mqtt://host:port`,
	} {
		_, err := pipeline.Parse(spec(server))
		require.ErrorContains(t, err, want, server)
	}
	_, err := pipeline.Parse(spec("tls://broker:8883"))
	require.NoError(t, err)
}

// TestSpecRefusesHalfAnArchiveS3KeyPair: an s3:// archive naming one of
// access_key_env and secret_key_env passed the spec's check (worker
// --check); the worker refused it only when it opened the archive, with
// an error naming neither the sink nor the archive. It is refused when
// the spec is loaded, naming the sink, its line and the location.
func TestSpecRefusesHalfAnArchiveS3KeyPair(t *testing.T) {
	archive := func(s3 string) []byte {
		return []byte(strings.Replace(smaSpec(goodNode), "  - kafka: {topic: readings.sma}\n", "  - archive: {location: s3://arc/p, s3: "+s3+"}\n", 1))
	}
	_, err := pipeline.Parse(archive("{access_key_env: AK}"))
	require.ErrorContains(t, err, "line 15: sinks[0]: archive sink s3://arc/p: s3 settings: name both the access key and the secret key variables, or neither")
	_, err = pipeline.Parse(archive("{access_key_env: AK, secret_key_env: SK}"))
	require.NoError(t, err)
	_, err = pipeline.Parse(archive("{endpoint: http://s3:7070}"))
	require.NoError(t, err)
	_, err = pipeline.Parse(archive("{response_timeout: 30s}"))
	require.NoError(t, err)
	_, err = pipeline.Parse(archive("{response_timeout: -1s}"))
	require.ErrorContains(t, err, "line 15: sinks[0]: archive sink s3://arc/p: s3 settings: response_timeout -1s is negative (0: the default, 1m0s)")
}

// TestSpecMQTTWildcardWithADeadLetterSink: an MQTT source subscribed to
// "#" (or "+") whose dead letters go to a dead_letter sink, with no
// dead_letter_topic, was refused: the empty topic was taken for a
// dead-letter topic the subscription matches ("dead letters would be
// read back"). It is accepted; a topic the subscription matches is still
// refused.
func TestSpecMQTTWildcardWithADeadLetterSink(t *testing.T) {
	for _, filter := range []string{"#", "+"} {
		spec := `name: plant
source:
  mqtt:
    servers: [tcp://localhost:1883]
    topics: ["` + filter + `"]
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3}}
`
		_, err := pipeline.Parse([]byte(spec + "dead_letter:\n  kafka: {topic: plant.bad, brokers: [localhost:9092]}\n"))
		require.NoError(t, err, filter)
		_, err = pipeline.Parse([]byte(spec))
		require.ErrorContains(t, err, "source.mqtt.dead_letter_topic is empty: malformed payloads need a destination", filter)
		require.NotContains(t, err.Error(), "read back", filter)
		_, err = pipeline.Parse([]byte(strings.Replace(spec, "    topics:", "    dead_letter_topic: dlq\n    topics:", 1)))
		require.ErrorContains(t, err, `source.mqtt.dead_letter_topic "dlq" matches the subscription "`+filter+`": dead letters would be read back`, filter)
		// A leading wildcard matches no '$' topic (MQTT 4.7.2): a broker
		// does not route a dead letter on one to the subscription. It
		// was refused as read back.
		_, err = pipeline.Parse([]byte(strings.Replace(spec, "    topics:", "    dead_letter_topic: $dlq\n    topics:", 1)))
		require.NoError(t, err, filter)
	}
}

// TestSpecEmptyDecoderIsReading: an empty decoder means reading (its
// doc), and a null one was taken as that, but an empty string (decoder:
// "${DECODER:-}" with the variable unset, quoted as the examples quote
// their references) was refused as an unknown decoder "".
func TestSpecEmptyDecoderIsReading(t *testing.T) {
	unset := pipeline.WithEnv(func(string) (string, bool) { return "", false })
	for _, d := range []string{`decoder: ""`, `decoder: "${DECODER:-}"`, `decoder: ${DECODER:-}`, `decoder:`} {
		p, err := pipeline.Parse([]byte(strings.Replace(smaSpec(goodNode), "graph:\n", d+"\ngraph:\n", 1)), unset)
		require.NoError(t, err, d)
		require.Equal(t, pipeline.ReadingDecoder{}, p.Decoder, d)
	}
}

// TestSpecRefusesAnMQTTPasswordWithoutAUser: source.mqtt.password_env
// without a username passed the spec's check, and the source connected
// without credentials: the password was sent only with a user name, so
// the key was silently ignored. It is refused, naming the key and line.
func TestSpecRefusesAnMQTTPasswordWithoutAUser(t *testing.T) {
	spec := mqttPasswordSpec
	_, err := pipeline.Parse([]byte(spec))
	require.ErrorContains(t, err, `line 7: source.mqtt.password_env "MQTT_PASSWORD" is set without source.mqtt.username`)
	_, err = pipeline.Parse([]byte(strings.Replace(spec, "    password_env:", "    username: plant\n    password_env:", 1)))
	require.NoError(t, err)
}

// TestSpecWithEnvKeepsTheSpecLines: Parse WithEnv expanded ${NAME}
// before decoding, so a value holding newlines shifted the lines of the
// problems after it: they named lines of the expanded text, not of the
// spec.
func TestSpecWithEnvKeepsTheSpecLines(t *testing.T) {
	spec := strings.Replace(mqttPasswordSpec, "name: plant", `name: "${MULTI}"`, 1)
	env := pipeline.WithEnv(func(k string) (string, bool) { return "a\nb\nc", k == "MULTI" })
	_, err := pipeline.Parse([]byte(spec), env)
	require.ErrorContains(t, err, `line 7: source.mqtt.password_env "MQTT_PASSWORD" is set without source.mqtt.username`)
	_, err = pipeline.Parse([]byte(strings.Replace(spec, "    password_env:", "    bogus: 1\n    password_env:", 1)), env)
	require.ErrorContains(t, err, "line 7:")
	require.ErrorContains(t, err, "bogus")
}
