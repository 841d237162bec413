package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// BackfillWorker serves the backfill workflow's activities of one
// pipeline on workflows.BackfillTaskQueue, and tflo's workflows on
// workflows.ControlTaskQueue (beside any pipeline worker that also does,
// so the control plane outlives them). Archives are file:// and s3://
// locations (S3 reached as S3 says). Sinks (see ParseSink):
// "influx:<db>/<rp>" writes to that bucket of the InfluxDB at URL through
// the one Output → point mapping (influx.OutputSink) with the pipeline's
// mode names, so a backfill reproduces the live points exactly (the
// database is created if missing); "kafka:<topic>" publishes to that
// topic of the Kafka cluster at Brokers, keyed by sensor as the live
// signal stream is ([ReplayedSignals]). Sinks are opened on first use and
// closed by Close.
type BackfillWorker struct {
	URL, Token string
	// InfluxTLS is the TLS of an https URL (nil: Go's defaults).
	InfluxTLS *tls.Config
	// Brokers of the Kafka cluster kafka: sinks publish to, and its TLS
	// and SASL (the pipeline's Kafka source's, by default).
	Brokers       []string
	KafkaSecurity kafka.Security
	// S3 reaches s3:// archives (default: the AWS standard chain).
	S3 archiveloc.S3
	// SinkS3 reaches the pipeline's own s3:// archives as its archive
	// sinks do: a location within one of these roots (the sink's
	// location) is read with that sink's settings, others as S3 says.
	SinkS3 map[string]archiveloc.S3
	// Modes names the modes of the pipeline's outputs
	// (pipeline.SinkEnv's).
	Modes streaming.ModeNames
	Log   *slog.Logger

	// Allowlists: a backfill's input comes from whoever can start a
	// workflow, and the worker acts with its own file system and InfluxDB
	// credentials. Nil: anything (tests); the worker binary always sets
	// them (BackfillConfig).

	// ArchiveRoots are the archive locations a backfill may read (and,
	// for file://, create): a file:// folder allows the folders inside
	// it, an s3://bucket[/prefix] the prefixes under it.
	ArchiveRoots []string
	// DatabasePrefixes: a backfill may write to, and create, an InfluxDB
	// database whose name starts with one of them.
	DatabasePrefixes []string

	mu    sync.Mutex
	sinks map[string]streaming.Sink // by sink name
	ws    []worker.Worker
}

// Sink kinds a backfill can write to (ParseSink).
const (
	SinkInflux = "influx"
	SinkKafka  = "kafka"
)

// SinkExamples shows valid sink names, for help texts and errors.
const SinkExamples = "influx:<db>/<rp> (e.g. influx:backfill/autogen) or kafka:<topic>"

// ParseSink checks a backfill sink name: "influx:<db>/<rp>" or
// "kafka:<topic>", and returns its kind and target (the bucket or topic).
// The error names the sink and says what a valid one looks like.
func ParseSink(name string) (kind, target string, err error) {
	kind, target, ok := strings.Cut(name, ":")
	switch {
	case !ok || target == "":
	case kind == SinkInflux:
		if db, rp, ok := strings.Cut(target, "/"); ok && db != "" && rp != "" && !strings.Contains(rp, "/") {
			return kind, target, nil
		}
	case kind == SinkKafka:
		if !strings.ContainsAny(target, "/ ") {
			return kind, target, nil
		}
	}
	return "", "", fmt.Errorf("backfill sink %q: want %s", name, SinkExamples)
}

// createDatabase runs CREATE DATABASE (idempotent in InfluxDB 1.8) so a
// backfill can target a fresh database by name.
func createDatabase(base, token, db string, tc *tls.Config) error {
	form := url.Values{"q": {fmt.Sprintf("CREATE DATABASE %q", db)}}
	req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(base, "/")+"/query", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user, pass, ok := strings.Cut(token, ":"); ok {
		req.SetBasicAuth(user, pass)
	}
	c := http.Client{Timeout: 10 * time.Second}
	if tc != nil {
		c.Transport = &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}
	}
	// base may carry user:password (the transport sends it as basic
	// auth): errors name it redacted.
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%w: influx %s: create database %q: %w", activities.ErrSinkUnavailable, envconfig.RedactURLs(base), db, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("influx %s: create database %q: %s: %s", envconfig.RedactURLs(base), db, resp.Status, body)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			err = fmt.Errorf("%w: %w", activities.ErrSinkUnavailable, err)
		}
		return err
	}
	return nil
}

// InfluxSinkName is the backfill sink name of an InfluxDB bucket.
func InfluxSinkName(bucket string) string { return SinkInflux + ":" + bucket }

// KafkaSinkName is the backfill sink name of a Kafka topic.
func KafkaSinkName(topic string) string { return SinkKafka + ":" + topic }

// Start registers the activities and starts the Temporal worker.
func (b *BackfillWorker) Start(tc client.Client) error {
	archives, err := b.archives()
	if err != nil {
		return err
	}
	aw := worker.New(tc, workflows.BackfillTaskQueue, worker.Options{})
	aw.RegisterActivity(&activities.Backfills{Sinks: b.sink, Archives: archives})
	cw := worker.New(tc, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(cw)
	for _, w := range []worker.Worker{aw, cw} {
		if err := w.Start(); err != nil {
			b.stop()
			return fmt.Errorf("backfill worker: %w", err)
		}
		b.ws = append(b.ws, w)
	}
	return nil
}

// Keys of the allowlists in the worker config, for errors.
const (
	keyArchiveRoots     = "backfill.archive_roots"
	keyDatabasePrefixes = "backfill.database_prefixes"
)

// archives returns the resolver of archive locations, refusing those
// outside ArchiveRoots before anything is opened or created.
func (b *BackfillWorker) archives() (func(string) (parquet.Archive, string, error), error) {
	resolve, err := b.resolver()
	if err != nil {
		return nil, err
	}
	if b.ArchiveRoots == nil {
		return resolve, nil
	}
	roots, err := archiveloc.ParseRoots(keyArchiveRoots, b.ArchiveRoots)
	if err != nil {
		return nil, fmt.Errorf("backfill worker: %w", err)
	}
	return func(location string) (parquet.Archive, string, error) {
		loc, err := archiveloc.Parse(location)
		if err != nil {
			return nil, "", err
		}
		if err := archiveloc.Allowed(loc, roots, keyArchiveRoots); err != nil {
			return nil, "", err
		}
		return resolve(location)
	}, nil
}

// resolver opens an archive location for reading: with the settings of
// the pipeline's archive sink whose root holds it (SinkS3; the deepest
// root first), else with S3.
func (b *BackfillWorker) resolver() (func(string) (parquet.Archive, string, error), error) {
	resolve := archiveloc.Resolver(b.S3, s3.WithLogger(b.log()))
	type sinkRoot struct {
		root    archiveloc.Location
		resolve func(string) (parquet.Archive, string, error)
	}
	var own []sinkRoot
	for root, c := range b.SinkS3 {
		loc, err := archiveloc.Parse(root)
		if err != nil {
			return nil, fmt.Errorf("backfill worker: archive sink: %w", err)
		}
		own = append(own, sinkRoot{loc, archiveloc.Resolver(c, s3.WithLogger(b.log()))})
	}
	slices.SortFunc(own, func(a, b sinkRoot) int { return len(b.root.String()) - len(a.root.String()) })
	if len(own) == 0 {
		return resolve, nil
	}
	return func(location string) (parquet.Archive, string, error) {
		loc, err := archiveloc.Parse(location)
		if err != nil {
			return nil, "", err
		}
		for _, o := range own {
			if loc.Within(o.root) {
				return o.resolve(location)
			}
		}
		return resolve(location)
	}, nil
}

// allowedDatabase refuses a database outside DatabasePrefixes.
func (b *BackfillWorker) allowedDatabase(db string) error {
	if b.DatabasePrefixes == nil {
		return nil
	}
	for _, p := range b.DatabasePrefixes {
		if strings.HasPrefix(db, p) {
			return nil
		}
	}
	return fmt.Errorf("influx database %q is not allowed: it starts with none of %s %q", db, keyDatabasePrefixes, b.DatabasePrefixes)
}

// sink returns the sink a backfill names, opening it on first use.
func (b *BackfillWorker) sink(name string) (streaming.Sink, error) {
	kind, target, err := ParseSink(name)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sinks[name]; s != nil {
		return s, nil
	}
	var s streaming.Sink
	if kind == SinkKafka {
		s, err = b.kafkaSink(target)
	} else {
		s, err = b.influxSink(target)
	}
	if err != nil {
		return nil, err
	}
	if b.sinks == nil {
		b.sinks = map[string]streaming.Sink{}
	}
	s = &cachedSink{Sink: s, drop: func(s streaming.Sink) { b.drop(name, s) }}
	b.sinks[name] = s
	return s, nil
}

// drop closes a cached sink that failed for good and forgets it, so the
// next backfill naming it (once its bucket exists) opens it afresh.
func (b *BackfillWorker) drop(name string, s streaming.Sink) {
	b.mu.Lock()
	if b.sinks[name] != s {
		b.mu.Unlock()
		return // dropped already
	}
	delete(b.sinks, name)
	b.mu.Unlock()
	b.log().Warn("backfill sink failed for good; the next backfill naming it opens it again", "sink", name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}

// cachedSink is a sink of the backfill worker's cache: one that fails
// for good (streaming.ErrSinkFailed) leaves the cache.
type cachedSink struct {
	streaming.Sink
	drop func(streaming.Sink)
}

func (c *cachedSink) Write(ctx context.Context, outs []streaming.Output) error {
	return c.failed(c.Sink.Write(ctx, outs))
}

func (c *cachedSink) Flush(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) error {
	return c.failed(c.Sink.Flush(ctx, shard, id))
}

func (c *cachedSink) failed(err error) error {
	if errors.Is(err, streaming.ErrSinkFailed) {
		c.drop(c)
	}
	return err
}

func (b *BackfillWorker) log() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Log
}

// backfillBatch is the Influx batch of a backfill sink: large, since a
// replay writes far faster than a live pipeline.
const backfillBatch = 20_000

// influxSink opens the sink of an InfluxDB bucket.
func (b *BackfillWorker) influxSink(bucket string) (streaming.Sink, error) {
	db := strings.SplitN(bucket, "/", 2)[0]
	if err := b.allowedDatabase(db); err != nil {
		return nil, fmt.Errorf("sink %s: %w", InfluxSinkName(bucket), err)
	}
	if err := createDatabase(b.URL, b.Token, db, b.InfluxTLS); err != nil {
		return nil, err
	}
	opts := []influx.Option{influx.WithToken(b.Token), influx.WithLogger(b.log()), influx.WithBatchSize(backfillBatch)}
	if b.InfluxTLS != nil {
		opts = append(opts, influx.WithTLS(b.InfluxTLS))
	}
	is, err := influx.NewSink(b.URL, bucket, opts...)
	if err != nil {
		return nil, err
	}
	return influx.NewOutputSink(is, b.Modes), nil
}

// kafkaSink opens the sink of a Kafka topic.
func (b *BackfillWorker) kafkaSink(topic string) (streaming.Sink, error) {
	if len(b.Brokers) == 0 {
		return nil, fmt.Errorf("sink kafka:%s: this backfill worker has no Kafka brokers configured", topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kafka.NewPublisher(ctx, kafka.PublishTo(topic, b.Brokers...), kafka.PublisherLogger(b.log()), kafka.PublisherSecurity(b.KafkaSecurity))
	var ne net.Error
	if err != nil && !errors.Is(err, kafka.ErrAuthentication) && errors.As(err, &ne) {
		// No broker answered in time: retried.
		return nil, fmt.Errorf("%w: %w", activities.ErrSinkUnavailable, err)
	}
	if err != nil {
		return nil, err
	}
	return kafka.NewOutputSink(p, ReplayedSignals{}), nil
}

// Close stops the worker and closes the sinks.
func (b *BackfillWorker) Close(ctx context.Context) {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sinks {
		_ = s.Close(ctx)
	}
}

func (b *BackfillWorker) stop() {
	for i := len(b.ws) - 1; i >= 0; i-- {
		b.ws[i].Stop()
	}
	b.ws = nil
}
