package portal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workers/central"
	"github.com/tflo-io/tflo/workflows"
)

// InfluxRowSink writes replayed archive rows to InfluxDB as the central
// worker's InfluxSink writes live outputs (measurement = signal, tags
// sensor and, for alarm episodes, mode; field value; the row's event
// time), so a backfill reproduces the live points exactly.
type InfluxRowSink struct {
	s *influx.Sink
}

var _ activities.RowSink = (*InfluxRowSink)(nil)

// NewInfluxRowSink wraps a connectors/influx Sink.
func NewInfluxRowSink(s *influx.Sink) *InfluxRowSink { return &InfluxRowSink{s: s} }

// WriteRows implements activities.RowSink.
func (k *InfluxRowSink) WriteRows(ctx context.Context, rows []parquet.Row) error {
	pts := make([]influx.Point, len(rows))
	fields := make([]influx.Field, len(rows))
	for i, r := range rows {
		fields[i] = influx.Field{Key: "value", Value: streaming.Float(r.Value)}
		pts[i] = influx.Point{Measurement: r.Signal, Sensor: r.Sensor, TS: r.TS, Fields: fields[i : i+1]}
		if r.Signal == central.SignalEpisode {
			pts[i].Mode = central.ModeName(streaming.Mode(r.Mode))
		}
	}
	return k.s.Write(ctx, pts...)
}

// Flush implements activities.RowSink.
func (k *InfluxRowSink) Flush(ctx context.Context) error { return k.s.Flush(ctx) }

// BackfillWorker serves the backfill workflow's activities on
// workflows.BackfillTaskQueue, and tflo's workflows on
// workflows.ControlTaskQueue (beside any central worker that also does,
// so the control plane outlives the central workers). Archives are
// file:// and s3:// locations (S3 reached as S3 says). Sinks (see
// ParseSink): "influx:<db>/<rp>" writes to that bucket of the InfluxDB at
// URL (the database is created if missing); "kafka:<topic>" publishes to
// that topic of the Kafka cluster at Brokers, keyed by sensor as the
// live signal stream is. Sinks are opened on first use and closed by
// Close.
type BackfillWorker struct {
	URL, Token string
	// Brokers of the Kafka cluster kafka: sinks publish to.
	Brokers []string
	// S3 reaches s3:// archives (default: the AWS standard chain).
	S3  archiveloc.S3
	Log *slog.Logger

	mu    sync.Mutex
	sinks map[string]*influx.Sink
	pubs  map[string]*kafka.Publisher
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
func createDatabase(base, token, db string) error {
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
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("influx %s: create database %q: %w", base, db, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("influx %s: create database %q: %s: %s", base, db, resp.Status, body)
	}
	return nil
}

// InfluxSinkName is the backfill sink name of an InfluxDB bucket.
func InfluxSinkName(bucket string) string { return SinkInflux + ":" + bucket }

// KafkaSinkName is the backfill sink name of a Kafka topic.
func KafkaSinkName(topic string) string { return SinkKafka + ":" + topic }

// Start registers the activities and starts the Temporal worker.
func (b *BackfillWorker) Start(tc client.Client) error {
	aw := worker.New(tc, workflows.BackfillTaskQueue, worker.Options{})
	aw.RegisterActivity(&activities.Backfills{Sinks: b.sink, Archives: archiveloc.Resolver(b.S3)})
	cw := worker.New(tc, workflows.ControlTaskQueue, worker.Options{})
	central.RegisterWorkflows(cw)
	for _, w := range []worker.Worker{aw, cw} {
		if err := w.Start(); err != nil {
			b.stop()
			return fmt.Errorf("backfill worker: %w", err)
		}
		b.ws = append(b.ws, w)
	}
	return nil
}

func (b *BackfillWorker) sink(name string) (activities.RowSink, error) {
	kind, target, err := ParseSink(name)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sinks == nil {
		b.sinks, b.pubs = map[string]*influx.Sink{}, map[string]*kafka.Publisher{}
	}
	if kind == SinkKafka {
		return b.kafkaSink(target)
	}
	if s := b.sinks[target]; s != nil {
		return NewInfluxRowSink(s), nil
	}
	if err := createDatabase(b.URL, b.Token, strings.SplitN(target, "/", 2)[0]); err != nil {
		return nil, err
	}
	s, err := influx.NewSink(b.URL, target, influx.WithToken(b.Token), influx.WithLogger(b.log()), influx.WithBatchSize(backfillBatch))
	if err != nil {
		return nil, err
	}
	b.sinks[target] = s
	return NewInfluxRowSink(s), nil
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

// kafkaSink returns the sink of topic (b.mu held).
func (b *BackfillWorker) kafkaSink(topic string) (activities.RowSink, error) {
	if p := b.pubs[topic]; p != nil {
		return NewKafkaRowSink(p), nil
	}
	if len(b.Brokers) == 0 {
		return nil, fmt.Errorf("sink kafka:%s: this backfill worker has no Kafka brokers configured", topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kafka.NewPublisher(ctx, kafka.PublishTo(topic, b.Brokers...), kafka.PublisherLogger(b.log()))
	if err != nil {
		return nil, err
	}
	b.pubs[topic] = p
	return NewKafkaRowSink(p), nil
}

// Close stops the worker and closes the sinks.
func (b *BackfillWorker) Close(ctx context.Context) {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sinks {
		_ = s.Close(ctx)
	}
	for _, p := range b.pubs {
		_ = p.Flush(ctx)
		p.Close()
	}
}

func (b *BackfillWorker) stop() {
	for i := len(b.ws) - 1; i >= 0; i-- {
		b.ws[i].Stop()
	}
	b.ws = nil
}
