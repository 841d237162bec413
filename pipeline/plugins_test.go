package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// csvDecoder reads "sensor<sep>ts<sep>value" lines: a decoder of a
// program's own, registered as sensor_csv.
type csvDecoder struct {
	Separator string `yaml:"separator"`
}

func (d csvDecoder) Decode(m pipeline.Message, r *pipeline.Record) error {
	f := bytes.Split(m.Value, []byte(d.Separator))
	if len(f) != 3 {
		return fmt.Errorf("want 3 fields separated by %q, got %d", d.Separator, len(f))
	}
	ts, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return fmt.Errorf("ts: %w", err)
	}
	v, err := strconv.ParseFloat(string(f[2]), 64)
	if err != nil {
		return fmt.Errorf("value: %w", err)
	}
	r.Key, r.TS, r.Inputs[0] = f[0], ts, streaming.Float(v)
	return nil
}

// recordedSink is a sink of the test's own, registered as recorded: its
// settings name the recorder that gets the outputs.
type recordedSink struct {
	Recorder string `yaml:"recorder"`
}

var recorders sync.Map // name → *recorder

func (s recordedSink) OpenSink(context.Context, pipeline.SinkEnv) (streaming.Sink, error) {
	r, ok := recorders.Load(s.Recorder)
	if !ok {
		return nil, fmt.Errorf("no recorder %q", s.Recorder)
	}
	return r.(*recorder), nil
}

var registerPlugins = sync.OnceValue(func() error {
	return errors.Join(
		pipeline.RegisterDecoder(pipeline.DecoderType{
			Name: "sensor_csv",
			Doc:  "Sensor readings as sensor,ts,value lines.",
			New: func(s pipeline.Settings) (pipeline.Decoder, error) {
				d := csvDecoder{Separator: ","}
				if err := s.Decode(&d); err != nil {
					return nil, err
				}
				if d.Separator == "" {
					return nil, errors.New("separator must not be empty")
				}
				return d, nil
			},
		}),
		pipeline.RegisterDecoder(pipeline.DecoderType{
			Name: "needs_schema",
			New: func(s pipeline.Settings) (pipeline.Decoder, error) {
				var d struct {
					Schema string `yaml:"schema"`
				}
				if err := s.Decode(&d); err != nil {
					return nil, err
				}
				if d.Schema == "" {
					return nil, errors.New("schema is required")
				}
				return csvDecoder{}, nil
			},
		}),
		pipeline.RegisterSink(pipeline.SinkType{
			Name: "recorded",
			Doc:  "The test's recorders.",
			New: func(s pipeline.Settings) (pipeline.SinkSpec, error) {
				var r recordedSink
				if err := s.Decode(&r); err != nil {
					return nil, err
				}
				if r.Recorder == "" {
					return nil, errors.New("recorder is required")
				}
				return r, nil
			},
		}))
})

// pluginSpec is a spec whose decoder and sink are the registered ones.
func pluginSpec(decoder, sink string) string {
	return `name: csv-readings
source:
  kafka:
    brokers: ["${BROKERS:-localhost:9092}"]
    topic: readings
decoder: ` + decoder + `
graph:
  inputs: [value]
  nodes:
    - {name: mean, type: sma, inputs: [value], params: {window: 3}}
    - {name: alarm, type: hysteresis, inputs: [mean], params: {low: 20, high: 25}}
    - {name: alarm_episode, type: episode, inputs: [alarm]}
  outputs: [mean, alarm_episode]
sinks:
  - ` + sink + `
state: {memory: 96MiB, dir: "${DIR:-/tmp/x}"}
checkpoint: {interval: 1h}
`
}

// TestSpecNamesRegisteredDecoderAndSink: a spec names a decoder and a
// sink a program registered as it names the built-in ones, with their
// settings read as strictly as the rest of the spec: each mistake names
// its key path and line; names that are taken or malformed are refused
// at registration.
func TestSpecNamesRegisteredDecoderAndSink(t *testing.T) {
	require.NoError(t, registerPlugins())

	p, err := pipeline.Parse([]byte(pluginSpec(`{sensor_csv: {separator: ";"}}`, `recorded: {recorder: a}`)))
	require.NoError(t, err)
	require.Equal(t, csvDecoder{Separator: ";"}, p.Decoder)
	require.Equal(t, []pipeline.SinkSpec{recordedSink{Recorder: "a"}}, p.Sinks)
	p, err = pipeline.Parse([]byte(pluginSpec(`sensor_csv`, `{recorded: {recorder: a}}`)))
	require.NoError(t, err)
	require.Equal(t, csvDecoder{Separator: ","}, p.Decoder, "no settings: the decoder's defaults")

	for _, tc := range []struct{ name, decoder, sink, want string }{
		{"unknown decoder", "sensor_cvs", "recorded: {recorder: a}",
			`line 6: decoder: unknown decoder "sensor_cvs" (known: reading, json, signal_envelope, needs_schema, sensor_csv)`},
		{"unknown sink", "sensor_csv", "recordd: {recorder: a}",
			`line 15: sinks[0].recordd: unknown key (known here: kafka, influx, archive, recorded)`},
		{"unknown setting", "{sensor_csv: {seperator: x}}", "recorded: {recorder: a}",
			`line 6: decoder.sensor_csv.seperator: unknown key (known here: separator)`},
		{"mistyped setting", "sensor_csv", "recorded: {recorder: [a]}",
			`line 15: sinks[0].recorded.recorder: want a string, got a list`},
		{"New refuses", "{sensor_csv: {separator: ''}}", "recorded: {recorder: a}",
			`line 6: decoder.sensor_csv: separator must not be empty`},
		{"New refuses a bare name", "needs_schema", "recorded: {recorder: a}",
			`line 6: decoder.needs_schema: schema is required`},
		{"New refuses a sink", "sensor_csv", "recorded: {}",
			`line 15: sinks[0].recorded: recorder is required`},
		{"two sinks in one entry", "sensor_csv", "{recorded: {recorder: a}, kafka: {topic: x}}",
			`line 15: sinks[0]: give exactly one of kafka, influx, archive, recorded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.Parse([]byte(pluginSpec(tc.decoder, tc.sink)))
			require.ErrorContains(t, err, tc.want)
		})
	}

	newDec := func(pipeline.Settings) (pipeline.Decoder, error) { return csvDecoder{}, nil }
	require.ErrorContains(t, pipeline.RegisterDecoder(pipeline.DecoderType{Name: "sensor_csv", New: newDec}), `decoder "sensor_csv" is already registered`)
	require.ErrorContains(t, pipeline.RegisterDecoder(pipeline.DecoderType{Name: "json", New: newDec}), `decoder "json" is built in`)
	require.ErrorContains(t, pipeline.RegisterDecoder(pipeline.DecoderType{Name: "Sensor-CSV", New: newDec}), `decoder name "Sensor-CSV": want lower case letters`)
	require.ErrorContains(t, pipeline.RegisterDecoder(pipeline.DecoderType{Name: "other_csv"}), `decoder "other_csv" has no New`)
	require.ErrorContains(t, pipeline.RegisterSink(pipeline.SinkType{Name: "kafka", New: func(pipeline.Settings) (pipeline.SinkSpec, error) { return nil, nil }}), `sink "kafka" is built in`)
	var names []string
	for _, st := range pipeline.SinkTypes() {
		names = append(names, st.Name)
	}
	require.Contains(t, names, "recorded")
}

// TestRegisteredDecoderAndSinkRun: a pipeline loaded from a spec naming
// the registered decoder and sink runs on Kafka (kfake): every output of
// the CSV records reaches the registered sink, equal to an uninterrupted
// run of the same graph over the same readings as JSON; a line the
// decoder refuses is dead-lettered with its reason.
func TestRegisteredDecoderAndSinkRun(t *testing.T) {
	require.NoError(t, registerPlugins())
	c := newCluster(t, 3)
	addrs := c.ListenAddrs()
	rec := newRecorder()
	recorders.Store(t.Name(), rec)
	env := map[string]string{"BROKERS": addrs[0], "DIR": t.TempDir()}
	p, err := pipeline.Parse([]byte(pluginSpec(`{sensor_csv: {separator: ";"}}`, `recorded: {recorder: `+t.Name()+`}`)),
		pipeline.WithEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.NoError(t, err)

	rs := makeReadings(8, 1, 30)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	recs := []*kgo.Record{{Key: []byte("s-00"), Value: []byte("s-00;not-a-time;1")}}
	for _, r := range rs {
		recs = append(recs, &kgo.Record{Key: []byte(r.sensor), Value: fmt.Appendf(nil, "%s;%d;%v", r.sensor, r.ts, r.value)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	w := start(t, p)
	w.waitFor(t, func() bool { st := w.w.Stats(); return st.RecordsIn == uint64(len(rs)) && st.DeadLettered == 1 }, 30*time.Second, "records read, the bad one dead-lettered")
	w.stop(t)
	asJSON := p
	asJSON.Decoder = pipeline.ReadingDecoder{}
	rec.requireExact(t, reference(t, asJSON, rs))

	dlq, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic+".dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer dlq.Close()
	var dead []*kgo.Record
	for len(dead) == 0 {
		fs := dlq.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "no dead letter")
		dead = append(dead, fs.Records()...)
	}
	require.Len(t, dead, 1)
	require.Equal(t, "s-00;not-a-time;1", string(dead[0].Value))
	var reason string
	for _, h := range dead[0].Headers {
		if h.Key == kafka.HeaderDLQError {
			reason = string(h.Value)
		}
	}
	require.Contains(t, reason, "ts: ")
}

// registerNilPlugins registers, once per test binary, a decoder and a
// sink whose New returns nil and no error.
var registerNilPlugins = sync.OnceValue(func() error {
	return errors.Join(
		pipeline.RegisterDecoder(pipeline.DecoderType{Name: "nil_decoder",
			New: func(pipeline.Settings) (pipeline.Decoder, error) { return nil, nil }}),
		pipeline.RegisterSink(pipeline.SinkType{Name: "nil_sink",
			New: func(pipeline.Settings) (pipeline.SinkSpec, error) { return nil, nil }}))
})

// TestSettingsDecodeRefusesANonPointerWithoutSettings: a registered
// decoder whose New decodes into a struct value, not a pointer, is refused
// whether or not the spec gives it settings, naming Settings.Decode and
// the decoder. Bug: without settings it was accepted (the mistake came only
// with the first spec giving some), and with them the error spoke of an
// internal package ("envconfig: destination is ...").
func TestSettingsDecodeRefusesANonPointerWithoutSettings(t *testing.T) {
	require.NoError(t, registerValueDecoder())
	for _, decoder := range []string{"value_settings", `{value_settings: {separator: ";"}}`} {
		spec := strings.Replace(smaSpec(goodNode), "graph:\n", "decoder: "+decoder+"\ngraph:\n", 1)
		_, err := pipeline.Parse([]byte(spec))
		require.ErrorContains(t, err, `line 6: decoder.value_settings: Settings.Decode: destination is pipeline_test.csvSettings, want a non-nil pointer to a struct (a mistake in the New of "value_settings", not in the spec)`, decoder)
	}
}

type csvSettings struct {
	Separator string `yaml:"separator"`
}

// registerValueDecoder registers, once per test binary, a decoder whose
// New decodes its settings into a value, not a pointer.
var registerValueDecoder = sync.OnceValue(func() error {
	return pipeline.RegisterDecoder(pipeline.DecoderType{Name: "value_settings",
		New: func(s pipeline.Settings) (pipeline.Decoder, error) {
			var c csvSettings
			if err := s.Decode(c); err != nil {
				return nil, err
			}
			return pipeline.ReadingDecoder{}, nil
		}})
})

// TestRegisteredTypeReturningNilIsRefused: a registered decoder whose New
// returned nil and no error was replaced by the default, reading,
// decoder without a word (and a sink's nil was "sink 0 is nil", naming
// neither its type nor its line); both are refused naming the key and
// the line.
func TestRegisteredTypeReturningNilIsRefused(t *testing.T) {
	require.NoError(t, registerNilPlugins())
	spec := strings.Replace(smaSpec(goodNode), "graph:\n", "decoder: nil_decoder\ngraph:\n", 1)
	spec = strings.Replace(spec, "  - kafka: {topic: readings.sma}\n", "  - kafka: {topic: readings.sma}\n  - nil_sink: {}\n", 1)
	_, err := pipeline.Parse([]byte(spec))
	require.ErrorContains(t, err, "line 6: decoder.nil_decoder: its New returned nil and no error")
	require.ErrorContains(t, err, "line 17: sinks[1].nil_sink: its New returned nil and no error")
}
