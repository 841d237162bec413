package temporalclient_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
)

func echoActivity(_ context.Context, s string) (string, error) { return "echo " + s, nil }

func echoWorkflow(ctx workflow.Context, s string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, echoActivity, s).Get(ctx, &out)
	return out, err
}

// TestMetricsAndTracesOnDevServer: a client built with WithMetrics and
// WithTracing records the SDK's metrics — schedule-to-start latency among
// them — in the Prometheus registry, and spans of the workflow and its
// activity in the tracer provider.
func TestMetricsAndTracesOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	reg := prometheus.NewRegistry()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	opts := client.Options{HostPort: srv.HostPort, Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))}
	opts, err := temporalclient.WithMetrics(opts, reg)
	require.NoError(t, err)
	opts, err = temporalclient.WithTracing(opts, tp)
	require.NoError(t, err)
	c, err := client.Dial(opts)
	require.NoError(t, err)
	defer c.Close()

	w := worker.New(c, "observed", worker.Options{})
	w.RegisterWorkflow(echoWorkflow)
	w.RegisterActivity(echoActivity)
	require.NoError(t, w.Start())
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "observed"}, echoWorkflow, "hi")
	require.NoError(t, err)
	var out string
	require.NoError(t, run.Get(ctx, &out))
	assert.Equal(t, "echo hi", out)

	// The worker counts a completed workflow after its task's response
	// returns, which can be after run.Get does: wait for it with a deadline.
	var fams []*dto.MetricFamily
	byName := map[string]*dto.MetricFamily{}
	require.Eventually(t, func() bool {
		var err error
		fams, err = reg.Gather()
		require.NoError(t, err)
		clear(byName)
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		return byName["temporal_workflow_completed_total"] != nil && byName["temporal_activity_schedule_to_start_latency_seconds"] != nil
	}, 10*time.Second, 20*time.Millisecond, "the SDK's metrics reach the registry")
	s2s := byName["temporal_activity_schedule_to_start_latency_seconds"]
	require.NotNil(t, s2s, "schedule-to-start latency is exported; got %d families", len(fams))
	assert.Equal(t, dto.MetricType_HISTOGRAM, s2s.GetType())
	var count uint64
	for _, m := range s2s.GetMetric() {
		count += m.GetHistogram().GetSampleCount()
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, "observed", labels["task_queue"])
		assert.Equal(t, "echoActivity", labels["activity_type"])
	}
	assert.Equal(t, uint64(1), count)
	require.NotNil(t, byName["temporal_workflow_completed_total"])
	assert.Equal(t, dto.MetricType_COUNTER, byName["temporal_workflow_completed_total"].GetType())

	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
	}
	joined := strings.Join(names, ", ")
	assert.Contains(t, joined, "StartWorkflow:echoWorkflow")
	assert.Contains(t, joined, "RunWorkflow:echoWorkflow")
	assert.Contains(t, joined, "RunActivity:echoActivity")
	var traceIDs = map[string]bool{}
	for _, s := range spans.Ended() {
		traceIDs[s.SpanContext().TraceID().String()] = true
	}
	assert.Len(t, traceIDs, 1, "the workflow and its activity are one trace: %s", joined)
}

// TestSDKCounterNamesEndInTotal: the SDK's counters were exported under
// their bare names (temporal_request), against Prometheus's convention
// and the SDK's own Prometheus naming, so Temporal's dashboards and
// alerts (temporal_request_total, ...) found nothing; a counter's name
// ends in _total, once, and a timer's in _seconds.
func TestSDKCounterNamesEndInTotal(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := temporalclient.NewPrometheusMetrics(reg)
	require.NoError(t, err)
	h.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(2)
	h.Counter("temporal_already_total").Inc(1)
	h.Timer("temporal_request_latency").Record(time.Millisecond)
	h.Gauge("temporal_num_pollers").Update(3)
	fams, err := reg.Gather()
	require.NoError(t, err)
	types := map[string]dto.MetricType{}
	for _, f := range fams {
		types[f.GetName()] = f.GetType()
	}
	require.Equal(t, map[string]dto.MetricType{
		"temporal_request_total":           dto.MetricType_COUNTER,
		"temporal_already_total":           dto.MetricType_COUNTER,
		"temporal_request_latency_seconds": dto.MetricType_HISTOGRAM,
		"temporal_num_pollers":             dto.MetricType_GAUGE,
	}, types)
}

// TestSDKTagWithAnEmptyValue: a series recorded with a tag whose value is
// empty and one without that tag have the same Prometheus labels (an
// empty label is no label); kept as two series, they were collected twice
// and every /metrics scrape failed. They are one series.
func TestSDKTagWithAnEmptyValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := temporalclient.NewPrometheusMetrics(reg)
	require.NoError(t, err)
	h.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(1)
	h.WithTags(map[string]string{"namespace": "default", "task_queue": ""}).Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"namespace": "other", "task_queue": "q"}).Counter("temporal_request").Inc(4)
	fams, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, fams, 1)
	got := map[string]float64{}
	for _, m := range fams[0].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		got[labels["namespace"]+"/"+labels["task_queue"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{"default/": 3, "other/q": 4}, got)
}
