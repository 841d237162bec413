package pipeline

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/streaming"
)

// SinkSpec opens one of a pipeline's sinks when the pipeline starts.
// KafkaSink, InfluxSink and ArchiveSink are the built-in ones; Use wraps a
// sink of your own. Every sink satisfies the one contract,
// streaming.Sink.
type SinkSpec interface {
	OpenSink(ctx context.Context, env SinkEnv) (streaming.Sink, error)
}

// SinkEnv is what a sink is opened with.
type SinkEnv struct {
	// Pipeline is the pipeline's name (archive files are named by it).
	Pipeline string
	// Source is the pipeline's source (a KafkaSink defaults to its
	// brokers).
	Source Source
	// TimeUnit is the records' time unit (outputs carry nanoseconds).
	TimeUnit TimeUnit
	// Modes names the modes of the graph's outputs, and ModesOf gives
	// one output's named modes (nil when its operator names none).
	Modes   streaming.ModeNames
	ModesOf func(output string) map[streaming.Mode]string
	// Outputs are the graph's outputs, in order: the names its Outputs
	// carry.
	Outputs []string
	// Log is the pipeline's logger.
	Log *slog.Logger
}

// Use makes a sink of your own one of the pipeline's sinks. The runtime
// calls its Close when the pipeline stops.
func Use(s streaming.Sink) SinkSpec { return useSink{s} }

type useSink struct{ s streaming.Sink }

// String names the sink Use wraps (`worker --print-config` prints it).
func (u useSink) String() string { return fmt.Sprintf("pipeline.Use(%T)", u.s) }

func (u useSink) OpenSink(context.Context, SinkEnv) (streaming.Sink, error) {
	if u.s == nil {
		return nil, errors.New("pipeline.Use: nil sink")
	}
	return u.s, nil
}

// Kafka sink formats.
const (
	// FormatJSON: one JSON record per output, keyed by the output's key:
	// {"key","name","ts","value"[,"mode"]} (kafka.JSONOutputs).
	FormatJSON = "json"
	// FormatSignalEnvelope: one signal envelope per record whose
	// Envelope.Trigger output emitted (kafka.SignalEnvelopes).
	FormatSignalEnvelope = "signal_envelope"
)

// KafkaSink publishes outputs to a Kafka topic with the idempotent
// producer, keyed by the outputs' key.
type KafkaSink struct {
	// Brokers (default: the Kafka source's brokers).
	Brokers []string `yaml:"brokers"`
	// Topic is written to. Required.
	Topic string `yaml:"topic"`
	// Format is FormatJSON (default) or FormatSignalEnvelope.
	Format string `yaml:"format"`
	// Envelope shapes FormatSignalEnvelope's records.
	Envelope *Envelope `yaml:"envelope"`
	// Security is TLS and SASL (default: the Kafka source's).
	Security *kafka.Security `yaml:"security"`
	// MaxBuffered bounds the records waiting for the broker (default
	// 10,000); a full buffer blocks the shard: back-pressure.
	MaxBuffered int `yaml:"max_buffered"`
}

// Envelope shapes signal envelopes: one per record whose Trigger output
// emitted; its mode is the trigger's mode renamed by Modes (keys are the
// operator's mode names, "up"; values the envelope's, "raised"); its
// payload holds Payload's fields in order.
type Envelope struct {
	// Trigger is the output whose emission publishes a signal.
	Trigger string `yaml:"trigger"`
	// Modes renames the trigger's modes in the envelope.
	Modes map[string]string `yaml:"modes"`
	// Payload lists the payload's fields, in order.
	Payload []PayloadField `yaml:"payload"`
}

// PayloadField is one field of an envelope's payload: Name in the JSON
// object, From the graph output whose value it carries (a graph input
// is carried by listing it among the graph's outputs, as the iot-portal
// edge does with value), or "$topic" for the topic the input record came
// from.
type PayloadField struct {
	Name string `yaml:"name"`
	From string `yaml:"from"`
}

// OpenSink implements SinkSpec.
func (k KafkaSink) OpenSink(ctx context.Context, env SinkEnv) (streaming.Sink, error) {
	enc, err := k.encoder(env)
	if err != nil {
		return nil, err
	}
	pub, err := k.publisher(ctx, env)
	if err != nil {
		return nil, err
	}
	return kafka.NewOutputSink(pub, enc), nil
}

// OpenDeadLetterSink implements DeadLetterSpec: the dead letters go to
// the topic as the records that came, plus tflo-dlq-* headers (Format
// and Envelope do not apply).
func (k KafkaSink) OpenDeadLetterSink(ctx context.Context, env SinkEnv) (streaming.Sink, error) {
	return k.openDeadLetters(ctx, env)
}

// openDeadLetters opens the dead-letter sink on the sink's publisher.
func (k KafkaSink) openDeadLetters(ctx context.Context, env SinkEnv, extra ...kafka.PublisherOption) (streaming.Sink, error) {
	pub, err := k.publisher(ctx, env, extra...)
	if err != nil {
		return nil, err
	}
	return kafka.NewDeadLetterSink(pub), nil
}

// sourceDeadLetters is the default dead-letter sink of a Kafka source: a
// KafkaSink to its dead-letter topic, on its brokers, that connects when
// it first produces (kafka.PublisherLazy). The source checks those brokers
// and credentials when it starts, and its error names the source: a
// pipeline with no dead-letter sink of its own must not fail earlier, on
// a producer it never asked for.
type sourceDeadLetters struct{ KafkaSink }

func (s sourceDeadLetters) OpenDeadLetterSink(ctx context.Context, env SinkEnv) (streaming.Sink, error) {
	return s.openDeadLetters(ctx, env, kafka.PublisherLazy())
}

// withDefaults is k with the defaults of its publisher filled in:
// kafka.DefaultMaxBuffered. Brokers and Security stay empty when unset:
// the publisher takes the source's when it opens, so an edit of the
// source's after loading a spec reaches them. The format's default is
// an output sink's (a dead letter has none).
func (k KafkaSink) withDefaults() KafkaSink {
	if k.MaxBuffered == 0 {
		k.MaxBuffered = kafka.DefaultMaxBuffered
	}
	return k
}

// BrokersFor returns the brokers k publishes to in a pipeline whose
// source is src: its own, else the Kafka source's.
func (k KafkaSink) BrokersFor(src Source) []string {
	b := splitLists(k.Brokers)
	if len(b) > 0 {
		return b
	}
	switch s := src.(type) {
	case *KafkaSource:
		return splitLists(s.Brokers)
	case KafkaSource:
		return splitLists(s.Brokers)
	}
	return nil
}

// sameCluster reports whether k publishes to src's cluster.
func (k KafkaSink) sameCluster(src *KafkaSource) bool {
	return slices.Equal(k.BrokersFor(src), splitLists(src.Brokers))
}

// publisher connects the sink's publisher (brokers and security default
// to the Kafka source's).
func (k KafkaSink) publisher(ctx context.Context, env SinkEnv, extra ...kafka.PublisherOption) (*kafka.Publisher, error) {
	brokers, sec := k.BrokersFor(env.Source), k.Security
	if src, ok := env.Source.(*KafkaSource); ok && sec == nil {
		sec = &src.Security
	}
	if len(brokers) == 0 || k.Topic == "" {
		return nil, fmt.Errorf("kafka sink: brokers %v and topic %q are both required", brokers, k.Topic)
	}
	opts := []kafka.PublisherOption{kafka.PublishTo(k.Topic, brokers...), kafka.PublisherLogger(env.Log)}
	if sec != nil {
		opts = append(opts, kafka.PublisherSecurity(*sec))
	}
	if k.MaxBuffered > 0 {
		opts = append(opts, kafka.PublisherMaxBuffered(k.MaxBuffered))
	}
	pub, err := kafka.NewPublisher(ctx, append(opts, extra...)...)
	if err != nil {
		// Which key the brokers came from: the address alone (a
		// refused 127.0.0.1:9092) did not say the sink took the source's.
		from := "its kafka.brokers"
		if len(splitLists(k.Brokers)) == 0 {
			from = "source.kafka.brokers"
		}
		return nil, fmt.Errorf("kafka sink (brokers from %s): %w", from, err)
	}
	return pub, nil
}

// DeadLetterSpec is a sink that takes dead letters (Pipeline.DeadLetter):
// it opens the streaming.Sink the runtime writes them to, as Outputs
// carrying a streaming.DeadLetter. KafkaSink and Use are ones.
type DeadLetterSpec interface {
	OpenDeadLetterSink(ctx context.Context, env SinkEnv) (streaming.Sink, error)
}

// OpenDeadLetterSink implements DeadLetterSpec: your sink receives the
// dead letters.
func (u useSink) OpenDeadLetterSink(ctx context.Context, env SinkEnv) (streaming.Sink, error) {
	return u.OpenSink(ctx, env)
}

// deadLetterSpec checks that s (nil: the default) takes dead letters.
func deadLetterSpec(s SinkSpec) error {
	if s == nil {
		return nil
	}
	if _, ok := s.(DeadLetterSpec); !ok {
		return fmt.Errorf("a %T does not take dead letters: use a kafka sink, or pipeline.Use(your own)", s)
	}
	return nil
}

// kafkaSinkOf returns s as a KafkaSink, if it is one.
func kafkaSinkOf(s SinkSpec) (KafkaSink, bool) {
	switch k := s.(type) {
	case KafkaSink:
		return k, true
	case *KafkaSink:
		if k != nil {
			return *k, true
		}
	}
	return KafkaSink{}, false
}

// sinkProblem checks what can be checked of a sink of a pipeline reading
// src without connecting: its security settings (a Kafka sink's TLS and
// SASL, the CA of an Influx sink), an archive's location and source.
func sinkProblem(s SinkSpec, src Source) error {
	switch s := s.(type) {
	case ArchiveSink:
		return s.check(src)
	case *ArchiveSink:
		return s.check(src)
	case KafkaSink:
		return s.check(src)
	case *KafkaSink:
		return s.check(src)
	case InfluxSink:
		return s.check()
	case *InfluxSink:
		return s.check()
	}
	return nil
}

// validTLS checks a section's TLS settings without reading files.
func validTLS(c *tlsconfig.Config) error {
	if c == nil {
		return nil
	}
	return c.Validate()
}

// buildTLS builds a section's TLS settings (nil: none).
func buildTLS(c *tlsconfig.Config) (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	return c.Build()
}

// check reports what is wrong with k for a pipeline reading src without
// connecting: no topic, no brokers (unless a Kafka source lends its
// own), a negative buffer, its security settings.
func (k KafkaSink) check(src Source) error {
	_, kafkaSource := src.(*KafkaSource)
	switch {
	case k.Topic == "":
		return errors.New("kafka sink: topic is empty")
	case len(splitLists(k.Brokers)) == 0 && !kafkaSource:
		return fmt.Errorf("kafka sink %q: brokers is empty (only a Kafka source lends its brokers)", k.Topic)
	case k.MaxBuffered < 0:
		return fmt.Errorf("kafka sink %q: max_buffered %d must not be negative", k.Topic, k.MaxBuffered)
	}
	if k.Security == nil {
		return nil
	}
	if err := k.Security.Validate(); err != nil {
		return fmt.Errorf("kafka sink %q: security: %w", k.Topic, err)
	}
	return nil
}

// Encoder returns the encoder the sink publishes with (what Evaluate's
// callers use to see the records a pipeline would publish).
func (k KafkaSink) Encoder(env SinkEnv) (kafka.OutputEncoder, error) { return k.encoder(env) }

func (k KafkaSink) encoder(env SinkEnv) (kafka.OutputEncoder, error) {
	scale := env.TimeUnit.Nanos()
	switch k.Format {
	case "", FormatJSON:
		if k.Envelope != nil {
			return nil, fmt.Errorf("kafka sink %q: envelope is only for format %s", k.Topic, FormatSignalEnvelope)
		}
		return kafka.JSONOutputs{Scale: scale, Modes: env.Modes}, nil
	case FormatSignalEnvelope:
		e := k.Envelope
		if e == nil || e.Trigger == "" {
			return nil, fmt.Errorf("kafka sink %q: format %s needs envelope.trigger (the output whose emission publishes a signal)", k.Topic, FormatSignalEnvelope)
		}
		// A name that is no output would never be seen: no signal, or
		// no such payload field, ever.
		if !slices.Contains(env.Outputs, e.Trigger) {
			return nil, fmt.Errorf("kafka sink %q: envelope.trigger %q is not an output of the graph %v", k.Topic, e.Trigger, env.Outputs)
		}
		var names map[streaming.Mode]string
		if env.ModesOf != nil {
			names = env.ModesOf(e.Trigger)
		}
		modes := map[streaming.Mode]string{}
		for from, to := range e.Modes {
			m, ok := modeByName(names, from)
			if !ok {
				return nil, fmt.Errorf("kafka sink %q: envelope mode %q is not a mode of output %q (%v)", k.Topic, from, e.Trigger, names)
			}
			modes[m] = to
		}
		for m, n := range names {
			if _, ok := modes[m]; !ok {
				modes[m] = n
			}
		}
		enc := kafka.SignalEnvelopes{Trigger: e.Trigger, Modes: modes, Scale: scale}
		for i, f := range e.Payload {
			if f.Name == "" || f.From == "" {
				return nil, fmt.Errorf("kafka sink %q: envelope payload field %+v needs a name and a from", k.Topic, f)
			}
			// A name given twice would be written twice in one JSON
			// object, and a reader keeps only the last: the other field
			// would be lost.
			if slices.ContainsFunc(e.Payload[:i], func(g PayloadField) bool { return g.Name == f.Name }) {
				return nil, fmt.Errorf("kafka sink %q: envelope payload field %q is named twice", k.Topic, f.Name)
			}
			if f.From != "$topic" && !slices.Contains(env.Outputs, f.From) {
				return nil, fmt.Errorf("kafka sink %q: envelope payload field %q is from %q, not an output of the graph %v (or $topic)", k.Topic, f.Name, f.From, env.Outputs)
			}
			enc.Payload = append(enc.Payload, kafka.PayloadField{Name: f.Name, From: f.From})
		}
		return enc, nil
	}
	return nil, fmt.Errorf("kafka sink %q: format %q is neither %s nor %s", k.Topic, k.Format, FormatJSON, FormatSignalEnvelope)
}

// modeByName finds a mode by its registered name, or by its number.
func modeByName(names map[streaming.Mode]string, name string) (streaming.Mode, bool) {
	for m, n := range names {
		if n == name {
			return m, true
		}
	}
	if n, err := strconv.Atoi(name); err == nil {
		return streaming.Mode(n), true
	}
	return 0, false
}

// InfluxSink writes outputs to InfluxDB (influx.OutputSink): measurement
// = output name, tag sensor = key, tag mode = the mode's name, field
// value, timestamp = event time.
type InfluxSink struct {
	// URL of the server (http or https). Required.
	URL string `yaml:"url"`
	// Bucket (InfluxDB 1.8: "db/rp"). Required.
	Bucket string `yaml:"bucket"`
	Org    string `yaml:"org"`
	// TokenEnv names the variable holding the token ("user:password" for
	// 1.8). Unset or empty, the sink writes without credentials (a
	// server without authentication), and says so in a warning at start.
	TokenEnv string `yaml:"token_env"`
	// TLS of an https URL: ca_file (a private CA; default the system
	// roots), cert_file and key_file, server_name.
	TLS *tlsconfig.Config `yaml:"tls"`
}

// check reports what is wrong with s without connecting: no url or
// bucket, a url that is not http(s)://host, its TLS settings.
func (s InfluxSink) check() error {
	if s.URL == "" || s.Bucket == "" {
		return fmt.Errorf("influx sink: url %q and bucket %q are both required (InfluxDB 1.8: bucket \"db/rp\")", s.URL, s.Bucket)
	}
	if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("influx sink: url %q is not http://host:port or https://host:port", s.URL)
	}
	if err := validTLS(s.TLS); err != nil {
		return fmt.Errorf("influx sink %s: %w", s.URL, err)
	}
	return nil
}

// OpenSink implements SinkSpec.
func (s InfluxSink) OpenSink(_ context.Context, env SinkEnv) (streaming.Sink, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	opts := []influx.Option{influx.WithOrg(s.Org), influx.WithLogger(env.Log)}
	if s.TokenEnv != "" {
		token := os.Getenv(s.TokenEnv)
		if token == "" && env.Log != nil {
			// Not refused: a spec shared with a server without
			// authentication (the examples') names a variable left unset.
			env.Log.Warn("influx sink writes without credentials", "url", s.URL, "token_env", s.TokenEnv,
				"why", "token_env names a variable that is unset or empty; a server with authentication will refuse the writes")
		}
		opts = append(opts, influx.WithToken(token))
	}
	if s.TLS != nil {
		tc, err := buildTLS(s.TLS)
		if err != nil {
			return nil, fmt.Errorf("influx sink %s: %w", s.URL, err)
		}
		opts = append(opts, influx.WithTLS(tc))
	}
	is, err := influx.NewSink(s.URL, s.Bucket, opts...)
	if err != nil {
		return nil, err
	}
	return influx.NewOutputSink(is, env.Modes), nil
}

// ArchiveSink archives outputs to Parquet files exactly once
// (parquet.Sink): per shard one file open at a time, finished at a target
// size or age (not at every checkpoint), its rows made durable at each
// checkpoint's pre-commit and published by its commit; a gained shard
// discards what its restored checkpoint did not commit. The archive is a
// local folder (Dir) or a location (Location: file:///dir or
// s3://bucket/prefix, with S3 saying how to reach the server). It needs
// a source whose offsets replay (Kafka).
type ArchiveSink struct {
	// Dir is a local archive folder. Give Dir or Location.
	Dir string `yaml:"dir"`
	// Location is the archive's URL: file:///dir or s3://bucket/prefix.
	Location string `yaml:"location"`
	// S3 says how to reach an s3:// location: endpoint (an S3-compatible
	// server, path-style), region and the names of the variables holding
	// the keys (empty: the AWS standard chain).
	S3 archiveloc.S3 `yaml:"s3"`
	// TargetFileSize finishes a file at this size (default 128MiB).
	TargetFileSize ByteSize `yaml:"target_file_size"`
	// MaxFileAge finishes a file this long after it opened, however small
	// (default 15m): the longest a row waits to become visible.
	MaxFileAge time.Duration `yaml:"max_file_age"`
	// Compression is the codec of the pages it writes: zstd (the
	// default: the smallest files) or snappy (a fifth to a third less CPU
	// per row; larger files, which compaction rewrites as zstd).
	Compression parquet.Compression `yaml:"compression"`
}

// OpenSink implements SinkSpec.
func (s ArchiveSink) OpenSink(ctx context.Context, env SinkEnv) (streaming.Sink, error) {
	loc, err := s.checked(env.Source)
	if err != nil {
		return nil, err
	}
	var extra []s3.Option
	if env.Log != nil {
		extra = append(extra, s3.WithLogger(env.Log))
	}
	arc, err := archiveloc.Open(ctx, loc, s.S3, extra...)
	if err != nil {
		return nil, fmt.Errorf("archive sink: %w", err)
	}
	opts := []parquet.WriterOption{parquet.WithCompression(s.Compression)}
	if s.TargetFileSize > 0 {
		opts = append(opts, parquet.WithTargetFileSize(int64(s.TargetFileSize)))
	}
	if s.MaxFileAge > 0 {
		opts = append(opts, parquet.WithMaxFileAge(s.MaxFileAge))
	}
	sink, err := parquet.NewSink(arc, env.Pipeline, opts...)
	if err != nil {
		return nil, err
	}
	la, ok := arc.(*parquet.LocalArchive)
	if !ok {
		return sink, nil
	}
	// The temp files crashes left in folders no write of this worker
	// sweeps (a shard that moved away for good): once, as it starts, in
	// the background. The sweep walks the whole archive (every pipeline's
	// folders) for up to 10s, which came out of the time the worker
	// allows for opening its state store and sinks.
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := sweepArchiveTemps(la, sctx)
		switch {
		case env.Log == nil:
		case err != nil && sctx.Err() != nil:
			env.Log.Info("archive sink: stale temp file sweep stopped as the sink closed", "archive", loc.String(), "deleted", n)
		case err != nil:
			env.Log.Warn("archive sink: stale temp files swept in part", "archive", loc.String(), "deleted", n, "err", err)
		case n > 0:
			env.Log.Info("archive sink: stale temp files deleted", "archive", loc.String(), "deleted", n)
		}
	}()
	return &sweepingSink{Sink: sink, stopSweep: func() { stop(); <-done }}, nil
}

// sweepArchiveTemps is the archive sink's background sweep of stale temp
// files (LocalArchive.SweepTemps); tests replace it.
var sweepArchiveTemps = (*parquet.LocalArchive).SweepTemps

// sweepingSink is an archive sink on a local archive whose opening sweep
// of stale temp files runs in the background: Close stops the sweep and
// waits for it before closing the sink, so it never outlives the sink.
type sweepingSink struct {
	*parquet.Sink
	stopSweep func() // cancels the sweep and waits for it
}

// Close implements streaming.Sink.
func (s *sweepingSink) Close(ctx context.Context) error {
	s.stopSweep()
	return s.Sink.Close(ctx)
}

// Root returns the archive's location as a URL (file:///dir for Dir):
// what a backfill reads it from, and the default backfill allowlist
// entry of the pipeline's archive.
func (s ArchiveSink) Root() (string, error) {
	loc, err := s.location()
	if err != nil {
		return "", err
	}
	return loc.String(), nil
}

// check reports what is wrong with s for a pipeline reading src, without
// opening the archive: its location, a source whose offsets do not
// replay, half an S3 key pair, a file size or age the writer refuses.
func (s ArchiveSink) check(src Source) error {
	loc, err := s.checked(src)
	if err != nil {
		return err
	}
	switch {
	case loc.Scheme == "s3" && s.S3.Validate() != nil:
		// Refused when the archive opens too, but only as the worker
		// starts: a spec's check (worker --check) passed it.
		return fmt.Errorf("archive sink %s: %w", loc, s.S3.Validate())
	case s.TargetFileSize < 0 || s.TargetFileSize > parquet.MaxTargetFileSize:
		return fmt.Errorf("archive sink: target_file_size %v must be between 1 byte and %v", s.TargetFileSize, ByteSize(parquet.MaxTargetFileSize))
	case s.MaxFileAge < 0:
		return fmt.Errorf("archive sink: max_file_age %v must not be negative", s.MaxFileAge)
	}
	return nil
}

// checked is check that also returns the location it parsed.
func (s ArchiveSink) checked(src Source) (archiveloc.Location, error) {
	if _, ok := src.(*KafkaSource); !ok && src != nil {
		return archiveloc.Location{}, fmt.Errorf("archive sink: the archive needs a source whose offsets replay (kafka); the %s source has none", src.sourceName())
	}
	return s.location()
}

// location is the archive's location: Dir as a file:// location, or
// Location parsed.
func (s ArchiveSink) location() (archiveloc.Location, error) {
	switch {
	case (s.Dir == "") == (s.Location == ""):
		return archiveloc.Location{}, fmt.Errorf("archive sink: give exactly one of dir %q and location %q (%s)", s.Dir, s.Location, archiveloc.Examples)
	case s.Dir != "":
		dir, err := filepath.Abs(s.Dir)
		if err != nil {
			return archiveloc.Location{}, fmt.Errorf("archive sink: dir %q: %w", s.Dir, err)
		}
		return archiveloc.Location{Scheme: "file", Dir: dir}, nil
	}
	loc, err := archiveloc.Parse(s.Location)
	if err != nil {
		return archiveloc.Location{}, fmt.Errorf("archive sink: %w", err)
	}
	return loc, nil
}

// archiveSink is what the runtime asks of an archive sink besides
// streaming's optional capabilities: what a commit archived, and the end
// of a shard (parquet.Sink).
type archiveSink interface {
	CommitCheckpoint(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) (parquet.CommitStats, error)
	Roll(shard streaming.ShardID)
	Release(shard streaming.ShardID, epoch streaming.Epoch)
}

var (
	_ archiveSink = (*parquet.Sink)(nil)
	_ archiveSink = (*sweepingSink)(nil)
)

// sinkSet fans a shard's outputs out to the pipeline's sinks.
type sinkSet struct {
	sinks  []streaming.Sink
	dead   bool // the dead-letter sink: how errors name it
	mu     sync.Mutex
	err    error         // first failed Write: fails every later Flush
	failed chan struct{} // closed at the first failed Write (Failed)
	closed bool
}

// name is how errors name sink i of the set, as the spec does.
func (m *sinkSet) name(i int) string {
	if m.dead {
		return "dead_letter"
	}
	return fmt.Sprintf("sinks[%d]", i)
}

// Failed is closed once a Write failed (Err says how): the worker stops
// on it (Run), as no later checkpoint of any of its shards can commit
// until the records are replayed from the last one.
func (m *sinkSet) Failed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed == nil {
		m.failed = make(chan struct{})
	}
	return m.failed
}

// Err is the first failed Write's error, naming its sink; nil before.
func (m *sinkSet) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// write writes a shard's outs to every sink. A write that fails is kept:
// every later flush fails, as the sinks' outputs have a hole, and the
// worker stops (Failed). But one that fails once ctx ended (the shard is
// being released, or the source stops, and a sink waiting for room in its
// buffer gave up) is returned instead, and the sinks are not written
// further: the caller refuses the shard's cuts from then on
// (shard.failed), and the records are replayed with their outputs from
// the last checkpoint.
func (m *sinkSet) write(ctx context.Context, outs []streaming.Output) error {
	if len(outs) == 0 {
		return nil
	}
	for i, s := range m.sinks {
		if err := s.Write(ctx, outs); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("writing outputs: %w", err)
			}
			m.mu.Lock()
			if m.err == nil {
				m.err = fmt.Errorf("%s: write: %w", m.name(i), err)
				if m.failed == nil {
					m.failed = make(chan struct{})
				}
				close(m.failed)
			}
			m.mu.Unlock()
		}
	}
	return nil
}

// flush is the pre-commit of checkpoint id of shard.
func (m *sinkSet) flush(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) error {
	if err := m.Err(); err != nil {
		return fmt.Errorf("an earlier sink write failed: %w", err)
	}
	var errs []error
	for _, s := range m.sinks {
		if err := s.Flush(ctx, shard, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// markCut tells the sinks that mark cuts where shard's checkpoint cut
// falls (under the shard's lock).
func (m *sinkSet) markCut(shard streaming.ShardID, offset int64) {
	for _, s := range m.sinks {
		if c, ok := s.(streaming.SinkCutMarker); ok {
			c.MarkCut(shard, offset)
		}
	}
}

// commit tells the sinks checkpoint id of shard committed and returns the
// rows and bytes the archive sinks committed.
func (m *sinkSet) commit(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) (rows, bytes int64, err error) {
	var errs []error
	for _, s := range m.sinks {
		if a, ok := s.(archiveSink); ok {
			st, err := a.CommitCheckpoint(ctx, shard, id)
			rows, bytes = rows+st.Rows, bytes+st.Bytes
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if c, ok := s.(streaming.SinkCommitter); ok {
			if err := c.Commit(ctx, shard, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return rows, bytes, errors.Join(errs...)
}

func (m *sinkSet) restore(ctx context.Context, shard streaming.ShardID, epoch streaming.Epoch, from streaming.RestoredCut) error {
	for _, s := range m.sinks {
		if r, ok := s.(streaming.SinkRestorer); ok {
			if err := r.Restore(ctx, shard, epoch, from); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropper is a sink that drops an output it cannot write (a non-finite
// value) instead of failing the batch, and counts it.
type dropper interface{ Dropped() uint64 }

// dropped sums the outputs the sinks dropped.
func (m *sinkSet) dropped() uint64 {
	var n uint64
	for _, s := range m.sinks {
		if d, ok := s.(dropper); ok {
			n += d.Dropped()
		}
	}
	return n
}

// roll tells the archive sinks shard's next checkpoint is its last here.
func (m *sinkSet) roll(shard streaming.ShardID) {
	for _, s := range m.sinks {
		if a, ok := s.(archiveSink); ok {
			a.Roll(shard)
		}
	}
}

// release tells the archive sinks shard is no longer owned at epoch.
func (m *sinkSet) release(shard streaming.ShardID, epoch streaming.Epoch) {
	for _, s := range m.sinks {
		if a, ok := s.(archiveSink); ok {
			a.Release(shard, epoch)
		}
	}
}

// close closes every sink once; later calls do nothing.
func (m *sinkSet) close(ctx context.Context) error {
	m.mu.Lock()
	done := m.closed
	m.closed = true
	m.mu.Unlock()
	if done {
		return nil
	}
	var errs []error
	for _, s := range m.sinks {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
