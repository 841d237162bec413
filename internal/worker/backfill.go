package worker

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
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// BackfillWorker serves the backfill workflow's activities of one
// pipeline on workflows.BackfillTaskQueue, and tflo's workflows on
// workflows.ControlTaskQueue (beside any pipeline worker that also does,
// so the control plane outlives them). Archives are file:// locations,
// and a sink named "influx:<db>/<rp>" writes to that bucket of the
// InfluxDB at URL through the one Output → point mapping
// (influx.OutputSink) with the pipeline's mode names, so a backfill
// reproduces the live points exactly. The database is created if
// missing; the sink is opened on first use and closed by Close.
type BackfillWorker struct {
	URL, Token string
	// Modes names the modes of the pipeline's outputs
	// (pipeline.SinkEnv's).
	Modes streaming.ModeNames
	Log   *slog.Logger

	mu    sync.Mutex
	sinks map[string]*influx.OutputSink
	ws    []worker.Worker
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
func InfluxSinkName(bucket string) string { return "influx:" + bucket }

// Start registers the activities and starts the Temporal worker.
func (b *BackfillWorker) Start(tc client.Client) error {
	b.sinks = map[string]*influx.OutputSink{}
	aw := worker.New(tc, workflows.BackfillTaskQueue, worker.Options{})
	aw.RegisterActivity(&activities.Backfills{Sinks: b.sink})
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

func (b *BackfillWorker) sink(name string) (streaming.Sink, error) {
	bucket, ok := strings.CutPrefix(name, "influx:")
	if !ok || bucket == "" {
		return nil, fmt.Errorf("sink %q: want influx:<db>/<rp>", name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sinks[bucket]; s != nil {
		return s, nil
	}
	if err := createDatabase(b.URL, b.Token, strings.SplitN(bucket, "/", 2)[0]); err != nil {
		return nil, err
	}
	is, err := influx.NewSink(b.URL, bucket, influx.WithToken(b.Token), influx.WithLogger(b.Log))
	if err != nil {
		return nil, err
	}
	s := influx.NewOutputSink(is, b.Modes)
	b.sinks[bucket] = s
	return s, nil
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
