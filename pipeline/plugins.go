package pipeline

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"gopkg.in/yaml.v3"

	"github.com/tflo-io/tflo/internal/envconfig"
)

// DecoderType is a decoder of your own that specs name like the built-in
// ones, once RegisterDecoder has registered it:
//
//	decoder: trades_csv                   # no settings
//	decoder: {trades_csv: {separator: ";"}}
type DecoderType struct {
	// Name is what specs call it: lower case letters, digits and
	// underscores, starting with a letter.
	Name string
	// Doc says what it decodes, in one sentence (`worker --operators`
	// lists it).
	Doc string
	// New makes the decoder from the settings the spec gives it (empty
	// when it gives none): decode them with Settings.Decode. Its error
	// is reported with the spec's line.
	New func(s Settings) (Decoder, error)
}

// SinkType is a sink of your own that specs name like the built-in ones
// (kafka, influx, archive), once RegisterSink has registered it:
//
//	sinks:
//	  - kafka: {topic: readings.sma}
//	  - alerts: {file: /var/log/alerts.jsonl}
type SinkType struct {
	// Name is what specs call it (as DecoderType.Name).
	Name string
	// Doc says where it writes, in one sentence.
	Doc string
	// New makes the sink from the settings the spec gives it. The
	// SinkSpec it returns is what `worker --print-config` prints (its
	// fields by their yaml tags): return the settings struct itself,
	// defaults applied, when it is one.
	New func(s Settings) (SinkSpec, error)
}

// Settings are the settings a spec gives a registered decoder or sink:
// the YAML under its name.
type Settings struct {
	name string
	node *yaml.Node // nil: none given
	line int        // of the name's value
}

// Name is the decoder's or sink's type name.
func (s Settings) Name() string { return s.name }

// Line is the spec line the settings (or the bare name) are on; 0 for a
// spec built in Go.
func (s Settings) Line() int { return s.line }

// Decode reads the settings into dst, a pointer to a struct with yaml
// tags, as strictly as the rest of the spec: an unknown key, a repeated
// key or a value of the wrong type is an error naming the key and its
// line. No settings leave dst as it is. A dst that is not a non-nil
// pointer is refused whether or not the spec gave settings.
func (s Settings) Decode(dst any) error {
	if v := reflect.ValueOf(dst); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("Settings.Decode: destination is %T, want a non-nil pointer to a struct (a mistake in the New of %q, not in the spec)", dst, s.name)
	}
	if s.node == nil || s.node.Tag == "!!null" {
		return nil
	}
	return envconfig.DecodeNode(s.node, dst)
}

var (
	pluginsMu sync.RWMutex
	decoders  = map[string]DecoderType{}
	sinkTypes = map[string]SinkType{}
)

// Built-in names, which registered types cannot take, and what each is.
var (
	builtinDecoders = []string{DecoderReading, DecoderJSON, DecoderSignalEnvelope}
	builtinSinks    = []string{"kafka", "influx", "archive"}
	builtinDocs     = map[string]string{
		DecoderReading:        `Sensor readings {"sensor":…,"ts":…,"value":…} (the default).`,
		DecoderJSON:           "JSON objects: {json: {key: FIELD, time: FIELD}}; graph inputs read the fields they name.",
		DecoderSignalEnvelope: "The edge's signal envelopes (a central pipeline over an edge's output).",
		"kafka":               "A Kafka topic, JSON or the edge's envelope (at least once: a replay writes its records again).",
		"influx":              "InfluxDB points (a replay overwrites the same points).",
		"archive":             "Parquet files in a folder or an S3 bucket, exactly once.",
	}
)

// PrintDecodersAndSinks writes the decoders and sinks a spec may name,
// the built-in ones and the registered ones, one a line with what each
// is (`worker --operators` ends with it).
func PrintDecodersAndSinks(w io.Writer) {
	fmt.Fprintln(w, "decoders (decoder: NAME, or {NAME: {settings}}):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range builtinDecoders {
		fmt.Fprintf(tw, "  %s\t%s\n", n, builtinDocs[n])
	}
	for _, t := range DecoderTypes() {
		fmt.Fprintf(tw, "  %s\t%s\n", t.Name, t.Doc)
	}
	tw.Flush()
	fmt.Fprintln(w, "sinks (sinks: - NAME: {settings}):")
	for _, n := range builtinSinks {
		fmt.Fprintf(tw, "  %s\t%s\n", n, builtinDocs[n])
	}
	for _, t := range SinkTypes() {
		fmt.Fprintf(tw, "  %s\t%s\n", t.Name, t.Doc)
	}
	tw.Flush()
}

var pluginName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// RegisterDecoder makes t a decoder specs may name, in every spec this
// process loads. Register at init or at the start of main, before
// loading a spec (workers/worker's Main loads it). A name that is taken
// (built in or registered), malformed, or a type without New is refused.
func RegisterDecoder(t DecoderType) error {
	return registerType("decoder", decoders, t.Name, t, t.New == nil, builtinDecoders)
}

// RegisterSink makes t a sink specs may name, as RegisterDecoder.
func RegisterSink(t SinkType) error {
	return registerType("sink", sinkTypes, t.Name, t, t.New == nil, builtinSinks)
}

func registerType[T any](kind string, into map[string]T, name string, t T, noNew bool, builtin []string) error {
	switch {
	case !pluginName.MatchString(name):
		return fmt.Errorf("pipeline: %s name %q: want lower case letters, digits and underscores, starting with a letter", kind, name)
	case slices.Contains(builtin, name):
		return fmt.Errorf("pipeline: %s %q is built in", kind, name)
	case noNew:
		return fmt.Errorf("pipeline: %s %q has no New", kind, name)
	}
	pluginsMu.Lock()
	defer pluginsMu.Unlock()
	if _, dup := into[name]; dup {
		return fmt.Errorf("pipeline: %s %q is already registered", kind, name)
	}
	into[name] = t
	return nil
}

// DecoderTypes returns the registered decoders, by name.
func DecoderTypes() []DecoderType { return sortedPlugins(decoders) }

// SinkTypes returns the registered sinks, by name.
func SinkTypes() []SinkType { return sortedPlugins(sinkTypes) }

func sortedPlugins[T any](m map[string]T) []T {
	pluginsMu.RLock()
	defer pluginsMu.RUnlock()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]T, len(names))
	for i, n := range names {
		out[i] = m[n]
	}
	return out
}

func lookup[T any](from map[string]T, name string) (T, bool) {
	pluginsMu.RLock()
	defer pluginsMu.RUnlock()
	t, ok := from[name]
	return t, ok
}

// decoderNames and sinkNames are every name a spec may use, the built-in
// ones first.
func decoderNames() []string {
	names := slices.Clone(builtinDecoders)
	for _, t := range DecoderTypes() {
		names = append(names, t.Name)
	}
	return names
}

func sinkNames() []string {
	names := slices.Clone(builtinSinks)
	for _, t := range SinkTypes() {
		names = append(names, t.Name)
	}
	return names
}

// newPlugin calls a registered type's New for the spec key path at
// (sinks[1].alerts), naming the line and the path in its error; the
// problems Settings.Decode found keep their own lines and key paths,
// under at.
func newPlugin[T any](at string, s Settings, newFn func(Settings) (T, error)) (T, error) {
	v, err := newFn(s)
	if err == nil && any(v) == nil {
		// Taken as none, a nil decoder became the default (reading)
		// decoder without a word, and a nil sink "sink 0 is nil".
		err = errors.New("its New returned nil and no error")
	}
	if err == nil {
		return v, nil
	}
	var es *envconfig.Errors
	if errors.As(err, &es) {
		problems := make([]string, len(es.Problems))
		for i, p := range es.Problems {
			if p.Path == "" || strings.HasPrefix(p.Path, "[") {
				p.Path = at + p.Path
			} else {
				p.Path = at + "." + p.Path
			}
			problems[i] = p.String()
		}
		return v, errors.New(strings.Join(problems, "; "))
	}
	if l := s.Line(); l > 0 {
		return v, fmt.Errorf("line %d: %s: %w", l, at, err)
	}
	return v, fmt.Errorf("%s: %w", at, err)
}
