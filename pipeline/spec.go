package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/streaming"
)

// Spec is a pipeline's YAML form; Load and Parse decode it into a
// Pipeline. Its sections are the Pipeline's own types, with unions where
// the Pipeline has an interface (the source, the decoder, each sink):
//
//	name: sma-readings
//	source:
//	  kafka: {brokers: [localhost:9092], topic: readings}
//	decoder: reading                 # reading | signal_envelope | {json: {key: symbol, time: ts}}
//	limits: {max_abs_value: 1e9}     # streaming.Limits; records outside them are dead-lettered
//	graph:
//	  inputs: [value]                # or [{value: smoothed}]: input "value" from field "smoothed"
//	  nodes:
//	    - {name: sma, type: sma, inputs: [value], params: {window: 10, warmup: partial}}
//	  outputs: [sma]
//	sinks:
//	  - kafka: {topic: readings.sma}
//	dead_letter: {kafka: {topic: readings.bad}} # default: source.kafka.dead_letter_topic
//	state: {dir: /var/lib/tflo/sma, memory: 256MiB}
//	checkpoint: {interval: 1s}
type Spec struct {
	Name       string           `yaml:"name"`
	Source     SourceSpec       `yaml:"source"`
	Decoder    DecoderSpec      `yaml:"decoder"`
	TimeUnit   TimeUnit         `yaml:"time_unit"`
	Limits     streaming.Limits `yaml:"limits"`
	Graph      Graph            `yaml:"graph"`
	Sinks      []SinkEntry      `yaml:"sinks"`
	DeadLetter *DeadLetterEntry `yaml:"dead_letter"`
	State      State            `yaml:"state"`
	Checkpoint Checkpoint       `yaml:"checkpoint"`
}

// SourceSpec is the source of a spec: exactly one of its fields.
type SourceSpec struct {
	Kafka *KafkaSource `yaml:"kafka"`
	MQTT  *MQTTSource  `yaml:"mqtt"`
}

// SinkEntry is one sink of a spec: exactly one of its fields, or one
// sink of a type registered with RegisterSink, by its name.
type SinkEntry struct {
	Kafka   *KafkaSink   `yaml:"kafka"`
	Influx  *InfluxSink  `yaml:"influx"`
	Archive *ArchiveSink `yaml:"archive"`
	// Registered holds a sink of a registered type under its name: its
	// Settings as the spec gives them (the SinkSpec its New made, in
	// what `worker --print-config` prints).
	Registered map[string]any `yaml:",inline"`
	line       int
}

// Extend takes a key naming a registered sink type
// (envconfig.Extensible).
func (s *SinkEntry) Extend(key string, value *yaml.Node) bool {
	if _, ok := lookup(sinkTypes, key); !ok {
		return false
	}
	if s.Registered == nil {
		s.Registered = map[string]any{}
	}
	s.Registered[key] = Settings{name: key, node: value, line: value.Line}
	return true
}

// Extensions names the registered sink types (envconfig.Extensible).
func (s *SinkEntry) Extensions() []string { return sinkNames()[len(builtinSinks):] }

// SetLine records where the sink was declared (envconfig.Positioned).
func (s *SinkEntry) SetLine(l int) { s.line = l }

// DeadLetterEntry is a spec's dead-letter sink (Pipeline.DeadLetter):
// a Kafka topic (a sink of your own is set in Go, with Use).
type DeadLetterEntry struct {
	Kafka *DeadLetterKafka `yaml:"kafka"`
	line  int
}

// DeadLetterKafka is a spec's Kafka dead-letter sink: a KafkaSink's
// keys but its format and envelope, as a dead letter is the record as it
// came (plus tflo-dlq-* headers).
type DeadLetterKafka struct {
	// Brokers (default: the Kafka source's).
	Brokers []string `yaml:"brokers"`
	// Topic is where dead letters go. Required.
	Topic string `yaml:"topic"`
	// Security is TLS and SASL (default: the Kafka source's).
	Security *kafka.Security `yaml:"security"`
	// MaxBuffered bounds the records waiting for the broker (default
	// 10,000); a full buffer blocks the shard: back-pressure.
	MaxBuffered int `yaml:"max_buffered"`
}

// sink is the KafkaSink d declares.
func (d DeadLetterKafka) sink() KafkaSink {
	return KafkaSink{Brokers: d.Brokers, Topic: d.Topic, Security: d.Security, MaxBuffered: d.MaxBuffered}
}

// DeadLetterKafkaOf is the spec form of a Kafka dead-letter sink k (the
// inverse of what a spec's dead_letter.kafka declares; k's Format, which
// dead letters do not use, is dropped).
func DeadLetterKafkaOf(k KafkaSink) DeadLetterKafka {
	return DeadLetterKafka{Brokers: k.Brokers, Topic: k.Topic, Security: k.Security, MaxBuffered: k.MaxBuffered}
}

// SetLine records where the sink was declared (envconfig.Positioned).
func (s *DeadLetterEntry) SetLine(l int) { s.line = l }

// Decoder names of a spec.
const (
	DecoderReading        = "reading"
	DecoderJSON           = "json"
	DecoderSignalEnvelope = "signal_envelope"
)

// DecoderSpec is the decoder of a spec: a name (reading,
// signal_envelope, or a decoder registered with RegisterDecoder), or a
// mapping of one name to its settings ({json: {key: symbol, time: ts}}).
// Empty means reading.
type DecoderSpec struct {
	Name string      `yaml:"-"`
	JSON JSONDecoder `yaml:"-"`
	// Settings of a registered decoder (its name is Name).
	Settings Settings `yaml:"-"`
	line     int
}

// MarshalText is the decoder as `worker --print-config` shows it: its
// name (reading when the spec names none: the decoder that runs), a
// registered decoder's name, or {json: {key: K, time: T}}. Its fields
// are no keys, so without it --print-config left the decoder out.
func (d DecoderSpec) MarshalText() ([]byte, error) {
	switch d.Name {
	case "":
		return []byte(DecoderReading), nil
	case DecoderJSON:
		return fmt.Appendf(nil, "{json: {key: %s, time: %s}}", d.JSON.Key, d.JSON.Time), nil
	}
	return []byte(d.Name), nil
}

// UnmarshalYAML reads either form. A name that is not built in is
// looked up among the registered decoders when the spec is converted
// (Spec.Pipeline).
func (d *DecoderSpec) UnmarshalYAML(n *yaml.Node) error {
	d.line = n.Line
	bad := func(format string, args ...any) error {
		return &envconfig.Errors{Problems: []envconfig.Problem{{Line: n.Line, Msg: fmt.Sprintf(format, args...)}}}
	}
	// A name that is not built in must be registered (RegisterDecoder).
	registered := func() error {
		if _, ok := lookup(decoders, d.Name); !ok {
			return bad("unknown decoder %q (known: %s)", d.Name, strings.Join(decoderNames(), ", "))
		}
		return nil
	}
	switch n.Kind {
	case yaml.ScalarNode:
		d.Name = n.Value
		if d.Name == "" {
			// Empty means reading, as a null does: decoder: "${DECODER:-}"
			// with the variable unset was refused as an unknown decoder "".
			return nil
		}
		if d.Name == DecoderJSON {
			return bad("json needs its key and time fields: {json: {key: <field>, time: <field>}}")
		}
	case yaml.MappingNode:
		if len(n.Content) != 2 {
			return bad("want one of %s, alone", strings.Join(decoderNames(), ", "))
		}
		d.Name = n.Content[0].Value
		if !slices.Contains(builtinDecoders, d.Name) {
			if err := registered(); err != nil {
				return err
			}
			d.Settings = Settings{name: d.Name, node: n.Content[1], line: n.Content[1].Line}
			return nil
		}
		if d.Name == DecoderJSON {
			var j struct {
				Key  string `yaml:"key"`
				Time string `yaml:"time"`
			}
			if err := envconfig.DecodeNode(n.Content[1], &j); err != nil {
				return prefixed(err, "json")
			}
			// Refused here, at the spec's line, naming the setting left
			// out: BindInputs, later, knows neither.
			if missing := jsonMissing(j.Key, j.Time); missing != "" {
				return bad("json needs its %s: {json: {key: <field>, time: <field>}}", missing)
			}
			d.JSON = JSONDecoder{Key: j.Key, Time: j.Time}
		} else if v := n.Content[1]; !(v.Kind == yaml.MappingNode && len(v.Content) == 0) && v.Tag != "!!null" {
			return bad("%s takes no settings", d.Name)
		}
	default:
		return bad("want a name or {json: {...}}")
	}
	if !slices.Contains(builtinDecoders, d.Name) {
		if err := registered(); err != nil {
			return err
		}
		d.Settings = Settings{name: d.Name, line: n.Line}
	}
	return nil
}

// prefixed makes the paths of err's problems relative to key.
func prefixed(err error, key string) error {
	var es *envconfig.Errors
	if errors.As(err, &es) {
		for i := range es.Problems {
			if es.Problems[i].Path == "" {
				es.Problems[i].Path = key
			} else {
				es.Problems[i].Path = key + "." + es.Problems[i].Path
			}
		}
	}
	return err
}

// UnmarshalYAML reads an input as its name ("value"), or as {name:
// field} ("value: smoothed": input value read from the field smoothed).
func (in *Input) UnmarshalYAML(n *yaml.Node) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Value != "":
		*in = Input{Name: n.Value}
		return nil
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[1].Kind == yaml.ScalarNode:
		*in = Input{Name: n.Content[0].Value, Field: n.Content[1].Value}
		return nil
	}
	return &envconfig.Errors{Problems: []envconfig.Problem{{Line: n.Line, Msg: "want an input name, or {name: field}"}}}
}

// SetLine records where the node was declared (envconfig.Positioned).
func (n *Node) SetLine(l int) { n.Line = l }

// Pipeline converts the spec into a Pipeline (defaults not applied).
func (s Spec) Pipeline() (Pipeline, error) {
	p := Pipeline{Name: s.Name, TimeUnit: s.TimeUnit, Limits: s.Limits, Graph: s.Graph, State: s.State, Checkpoint: s.Checkpoint}
	var errs []error
	switch {
	case s.Source.Kafka != nil && s.Source.MQTT != nil:
		errs = append(errs, errors.New("source: give kafka or mqtt, not both"))
	case s.Source.Kafka != nil:
		p.Source = s.Source.Kafka
	case s.Source.MQTT != nil:
		p.Source = s.Source.MQTT
	default:
		errs = append(errs, errors.New("source: give kafka or mqtt"))
	}
	switch s.Decoder.Name {
	case "", DecoderReading:
		p.Decoder = ReadingDecoder{}
	case DecoderJSON:
		p.Decoder = s.Decoder.JSON
	case DecoderSignalEnvelope:
		p.Decoder = SignalEnvelopeDecoder{}
	default:
		if t, ok := lookup(decoders, s.Decoder.Name); ok {
			d, err := newPlugin("decoder."+t.Name, s.Decoder.Settings, t.New)
			if err != nil {
				errs = append(errs, err)
				d = unconverted{err}
			}
			p.Decoder = d
		} else {
			err := fmt.Errorf("line %d: decoder: unknown decoder %q (known: %s)", s.Decoder.line, s.Decoder.Name, strings.Join(decoderNames(), ", "))
			errs = append(errs, err)
			p.Decoder = unconverted{err}
		}
	}
	for i, e := range s.Sinks {
		var set []SinkSpec
		if e.Kafka != nil {
			set = append(set, *e.Kafka)
		}
		if e.Influx != nil {
			set = append(set, *e.Influx)
		}
		if e.Archive != nil {
			set = append(set, *e.Archive)
		}
		for _, name := range slices.Sorted(maps.Keys(e.Registered)) {
			at := fmt.Sprintf("sinks[%d].%s", i, name)
			switch v := e.Registered[name].(type) {
			case SinkSpec: // a Spec built in Go may hold the sink itself
				set = append(set, v)
			case Settings:
				t, ok := lookup(sinkTypes, name)
				if !ok {
					errs = append(errs, fmt.Errorf("line %d: %s: unknown sink (known: %s)", e.line, at, strings.Join(sinkNames(), ", ")))
					continue
				}
				sink, err := newPlugin(at, v, t.New)
				if err != nil {
					errs = append(errs, err)
					sink = unconverted{err}
				}
				set = append(set, sink)
			default:
				errs = append(errs, fmt.Errorf("line %d: %s: want the sink's Settings or a SinkSpec, got %T", e.line, at, v))
			}
		}
		if len(set) != 1 {
			err := fmt.Errorf("line %d: sinks[%d]: give exactly one of %s", e.line, i, strings.Join(sinkNames(), ", "))
			errs = append(errs, err)
			// Kept in its place, so the later sinks' problems name their
			// own index (and line).
			set = []SinkSpec{unconverted{err}}
		}
		p.Sinks = append(p.Sinks, set[0])
	}
	if e := s.DeadLetter; e != nil {
		at := "" // set by the environment (TFLO_DEAD_LETTER_*): no line
		if e.line > 0 {
			at = fmt.Sprintf("line %d: ", e.line)
		}
		if e.Kafka == nil {
			errs = append(errs, fmt.Errorf("%sdead_letter: give kafka", at))
		} else {
			p.DeadLetter = e.Kafka.sink()
		}
	}
	return p, errors.Join(errs...)
}

// unconverted stands in the Pipeline of a Spec for a decoder or a sink
// the spec declares but Spec.Pipeline could not make (err, reported
// with the conversion's problems), so that the spec's check goes on to
// report the rest of its problems at once: the later sinks at their own
// indices, and no problem of a default (the reading decoder's inputs)
// the spec did not ask for. Its decoder refuses every message, its sink
// every open, with err.
type unconverted struct{ err error }

func (u unconverted) Decode(Message, *Record) error { return u.err }

func (u unconverted) OpenSink(context.Context, SinkEnv) (streaming.Sink, error) { return nil, u.err }

// LoadOption configures Load and Parse.
type LoadOption func(*loadConfig)

type loadConfig struct {
	reg    *streaming.Registry
	lookup func(string) (string, bool)
}

// WithRegistry resolves operator types in r (default DefaultRegistry).
// The Pipeline returned remembers r: Run, Evaluate and SinkEnv resolve
// its types in r too, unless given another registry.
func WithRegistry(r *streaming.Registry) LoadOption { return func(c *loadConfig) { c.reg = r } }

// WithEnv makes Parse replace ${NAME} and ${NAME:-default} references
// with lookup's variables (Load uses the process environment).
func WithEnv(lookup func(string) (string, bool)) LoadOption {
	return func(c *loadConfig) { c.lookup = lookup }
}

// Load reads the pipeline spec at path into a Pipeline with its defaults
// applied, and checks it, building its graph against the registry. The
// file is read strictly: an unknown key, a repeated key or a value of the
// wrong type is refused with its key path and line, every problem of the
// file at once; an unknown operator, an unknown or mistyped parameter, an
// unknown input or a cycle names the node and its line; a value out of
// range (a negative duration, an empty topic) names its key path, and its
// line when the file set it or its variable when a TFLO_* variable did.
// The problems that pass the decoding (values,
// graph, sinks, decoder) are reported together, every one at once. ${NAME} and
// ${NAME:-default} are replaced by environment variables, and TFLO_*
// variables override keys (internal/envconfig's rule: state.dir is
// TFLO_STATE_DIR). Defaults are applied last, so a default derived from
// another key (the dead-letter topic from the topic) sees what the file
// and the environment set.
func Load(path string, opts ...LoadOption) (Pipeline, error) {
	cfg := loadConfig{lookup: os.LookupEnv}
	for _, o := range opts {
		o(&cfg)
	}
	var s Spec
	origins, err := envconfig.LoadOrigins(path, envconfig.Prefix, &s)
	if err != nil {
		return Pipeline{}, err
	}
	return s.check(path, cfg, specWhere(origins))
}

// Parse is Load of spec bytes, without TFLO_* overrides and, unless
// WithEnv, without ${NAME} references: what embedded specs and tests use.
func Parse(data []byte, opts ...LoadOption) (Pipeline, error) {
	var cfg loadConfig
	for _, o := range opts {
		o(&cfg)
	}
	var s Spec
	var origins envconfig.Origins
	var err error
	if cfg.lookup != nil {
		origins, err = envconfig.ExpandOrigins(data, "pipeline spec", cfg.lookup, &s)
	} else {
		origins, err = envconfig.DecodeOrigins(data, "pipeline spec", &s)
	}
	if err != nil {
		var es *envconfig.Errors
		if errors.As(err, &es) {
			es.File = "pipeline spec"
		}
		return Pipeline{}, err
	}
	return s.check("", cfg, specWhere(origins))
}

// specWhere says where the value of a key that has a problem was set,
// to start the problem with: "line N: " for the file's line of the key,
// else, for a key the file left out, that of the nearest section around
// it the file wrote (a missing source.kafka.brokers is reported at
// "kafka:"); "environment NAME: " for a key a TFLO_* variable set; ""
// when nothing says.
func specWhere(o envconfig.Origins) func(key string) string {
	at := func(l int) string { return "line " + strconv.Itoa(l) + ": " }
	return func(key string) string {
		if v := o.Env(key); v != "" {
			return "environment " + v + ": "
		}
		if l := o.Line(key); l > 0 {
			return at(l)
		}
		if o.Of(key) != "default" {
			return ""
		}
		for p := key; ; {
			i := strings.LastIndexAny(p, ".[")
			if i <= 0 {
				return ""
			}
			p = p[:i]
			if l := o.Line(p); l > 0 {
				return at(l)
			}
		}
	}
}

// check converts s and builds its graph; where says where a key path
// was set (specWhere), for the problems of one key.
func (s Spec) check(path string, cfg loadConfig, where func(key string) string) (Pipeline, error) {
	name := path
	if name == "" {
		name = "pipeline spec"
	}
	// The conversion's problems (a sink entry naming no type or two, a
	// registered decoder or sink refusing its settings, no source) are
	// reported with the rest of the spec's, every one at once: a spec
	// fixed one problem at a time met the next only on its next run.
	p, cerr := s.Pipeline()
	p = p.withDefaults()
	_, err := compileSpec(p, cfg.reg, where)
	if err := errors.Join(cerr, err); err != nil {
		return Pipeline{}, fmt.Errorf("%s: %w", name, err)
	}
	p.registry = cfg.reg
	return p, nil
}

// WithDefaults returns p with every default filled in, as Run sees it.
func (p Pipeline) WithDefaults() Pipeline { return p.withDefaults() }
