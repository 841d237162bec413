package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workers/simulator"
)

// get returns the status and body of url ("" and 0 when it does not answer).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOperatorEndpointsAndMetrics runs the worker main (with --pprof) on a
// Kafka pipeline writing to a real InfluxDB, checkpointing to S3
// (versitygw) and registered in NATS, and scrapes what an operator
// watches: /healthz, /readyz (not ready until the group gave it its
// partitions and they are restored), pprof, and the metrics to alert on —
// checkpoint failures and age per shard, the breaker as one series per
// state, Kafka consumer lag, the InfluxDB sink's points, retries,
// rejections and breaker, the S3 store's requests, the split protocol's
// and the coordination store's collectors.
func TestOperatorEndpointsAndMetrics(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 2})
	require.NoError(t, err)
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, err := devstack.StartInflux(ctx, devstack.InfluxOptions{Dir: t.TempDir()})
	if err != nil {
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "" {
			t.Skipf("no influxd: %v", err)
		}
		t.Fatal(err)
	}
	defer in.Close()
	require.NoError(t, in.CreateDatabase(ctx, "obs"))
	s3 := s3test.Start(t, "ckpt")
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	defer ns.Shutdown()

	spec := writeFile(t, "obs.yaml", fmt.Sprintf(`name: obs
source:
  kafka: {brokers: [%q], topic: readings, session_timeout: 2s}
decoder: reading
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 2, warmup: partial}}
sinks:
  - influx: {url: %q, bucket: obs/autogen}
state:
  dir: %q
  memory: 128MiB
  durable:
    s3: {bucket: ckpt, endpoint: %q, region: us-east-1, access_key_env: OBS_S3_KEY, secret_key_env: OBS_S3_SECRET}
checkpoint:
  interval: 200ms
`, k.Addrs()[0], in.URL, t.TempDir(), s3.URL))
	maddr := freePort(t)
	t.Setenv("OBS_S3_KEY", s3.AccessKey)
	t.Setenv("OBS_S3_SECRET", s3.SecretKey)
	t.Setenv("TFLO_WORKER_ID", "obs-1")
	t.Setenv("TFLO_METRICS_ADDR", maddr)
	t.Setenv("TFLO_COORDINATION_NATS_URL", ns.ClientURL())
	t.Setenv("TFLO_COORDINATION_JOB", "obs")

	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() {
		done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec, "--pprof"}, &errOut)
	}()
	base := "http://" + maddr
	require.Eventually(t, func() bool { c, _ := get(base + "/healthz"); return c == http.StatusOK }, 30*time.Second, 20*time.Millisecond, errOut.String())
	require.Eventually(t, func() bool { c, _ := get(base + "/readyz"); return c == http.StatusOK }, 60*time.Second, 50*time.Millisecond, errOut.String())
	require.Equal(t, 2.0, metric(t, base+"/metrics", "tflo_pipeline_owned_shards"), "ready means its partitions are held")
	code, body := get(base + "/debug/pprof/")
	require.Equal(t, http.StatusOK, code, "--pprof serves the profiles")
	require.Contains(t, body, "goroutine")

	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("readings", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	const n = 40
	for i := range n {
		require.NoError(t, pub.Publish(ctx, fmt.Sprintf("s%d", i%5), fmt.Appendf(nil, `{"sensor":"s%d","ts":%d,"value":%d}`, i%5, 1_700_000_000_000+int64(i)*1000, i)))
	}
	require.NoError(t, pub.Flush(ctx))
	url := base + "/metrics"
	require.Eventually(t, func() bool { return metric(t, url, "tflo_pipeline_records_in_total") == n }, 30*time.Second, 20*time.Millisecond, errOut.String())
	require.Eventually(t, func() bool { return metric(t, url, "tflo_influx_points_total") == n }, 30*time.Second, 50*time.Millisecond, "the influx sink's acknowledged points")
	require.Eventually(t, func() bool { return metric(t, url, "tflo_pipeline_checkpoints_total") > 0 }, 30*time.Second, 50*time.Millisecond)

	_, text := get(url)
	requireLines(t, text,
		`(?m)^tflo_pipeline_checkpoint_failures_total\{pipeline="obs",shard="readings/0"\} 0$`,
		`(?m)^tflo_pipeline_checkpoint_failures_total\{pipeline="obs",shard="readings/1"\} 0$`,
		`(?m)^tflo_pipeline_checkpoint_age_seconds\{pipeline="obs",shard="readings/1"\} \S+$`,
		`(?m)^tflo_pipeline_checkpoint_breaker_state\{pipeline="obs",shard="readings/0",state="closed"\} 1$`,
		`(?m)^tflo_pipeline_checkpoint_breaker_state\{pipeline="obs",shard="readings/0",state="open"\} 0$`,
		`(?m)^tflo_pipeline_checkpoint_breaker_state\{pipeline="obs",shard="readings/0",state="half-open"\} 0$`,
		`(?m)^tflo_pipeline_kafka_consumer_lag_records\{pipeline="obs",shard="readings/0"\} 0$`,
		`(?m)^tflo_pipeline_kafka_consumer_lag_records\{pipeline="obs",shard="readings/1"\} 0$`,
		`(?m)^tflo_pipeline_checkpoint_duration_seconds_bucket\{`,
		`(?m)^tflo_influx_retries_total\{bucket="obs/autogen",pipeline="obs",sink="0"\} 0$`,
		`(?m)^tflo_influx_rejected_points_total\{bucket="obs/autogen",pipeline="obs",sink="0"\} 0$`,
		`(?m)^tflo_influx_breaker_state\{bucket="obs/autogen",pipeline="obs",sink="0",state="closed"\} 1$`,
		`(?m)^tflo_s3_requests_total\{bucket="ckpt",operation="PutObject",outcome="ok",pipeline="obs"\} [1-9]`,
		`(?m)^tflo_split_quarantined\{pipeline="obs",worker="obs-1"\} 0$`,
		`(?m)^tflo_coordination_store_op_duration_seconds_count\{`,
		`(?m)^# TYPE tflo_pipeline_checkpoint_duration_seconds histogram$`,
	)

	// The dashboard reads what this worker serves, and what the edge's
	// MQTT source and the simulator register (their registries here).
	other := prometheus.NewRegistry()
	_, err = mqtt.PrometheusCounters(other, "tflo", "edge")
	require.NoError(t, err)
	var sim simulator.MainConfig
	sim.Sensors, sim.MQTT.URL = 1, "mqtt://127.0.0.1:1"
	_, err = simulator.NewProcess(sim, slog.New(slog.DiscardHandler), other)
	require.NoError(t, err)
	requireDashboardMetricsExist(t, text+exposition(t, other))

	stopWithSIGTERM(t, done, &errOut, 60*time.Second)
}

// TestFatalStopLoggedOnce: a worker whose source fails logged the failure
// twice, at INFO ("pipeline worker stopped" err=...) and then at ERROR;
// it is logged once, at ERROR, and the exit code is 1.
func TestFatalStopLoggedOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	ln.Close() // nothing listens there: the Kafka source cannot connect
	spec := writeFile(t, "dead.yaml", fmt.Sprintf(`name: dead
source:
  kafka: {brokers: [%q], topic: readings}
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 2}}
sinks: []
state: {dir: %q, memory: 128MiB}
`, dead, t.TempDir()))
	var errOut logtest.Buffer
	code := worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec}, &errOut)
	require.Equal(t, worker.ExitFailure, code, errOut.String())
	logs := errOut.String()
	require.Equal(t, 1, strings.Count(logs, dead), "the failure is logged once:\n%s", logs)
	require.Regexp(t, `(?m)^time=\S+ level=ERROR msg="stopped with an error" .*`+regexp.QuoteMeta(dead), logs)
}

// stdout runs f with os.Stdout captured and returns what it printed.
// printConfig runs the worker's main with args and --print-config, which
// must exit 0, and returns its stdout and stderr.
func printConfig(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var errOut bytes.Buffer
	var code int
	out := stdout(t, func() {
		code = worker.RunMain(worker.PipelineMain(), append(args, "--print-config"), &errOut)
	})
	require.Equal(t, worker.ExitOK, code, errOut.String())
	return out, errOut.String()
}

func stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() { b, _ := io.ReadAll(r); out <- string(b) }()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	return <-out
}

// TestPrintConfig: --print-config prints the effective config and spec,
// each value with its origin (default, FILE:LINE, env NAME), secrets
// redacted; the dead-letter topic is derived from the topic the
// environment set (defaults come after loading), the graph's outputs,
// the Kafka sinks' brokers (the source's), format and buffer and the
// archive sink's file size and age show their defaults; the Temporal
// connection shows as dialled, its address from TEMPORAL_ADDRESS where
// temporal.address is empty.
func TestPrintConfig(t *testing.T) {
	cfg := writeFile(t, "c.yaml", "worker_id: w1\ncoordination:\n  nats_url: nats://u:pw-secret@nats:4222\n")
	specPath := writeFile(t, "p.yaml", `name: trades
source:
  kafka:
    brokers: [k:9092]
    topic: readings
    security: {sasl: {mechanism: PLAIN, username: u, password_env: KAFKA_PW}}
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3}}
state: {dir: /tmp/x, memory: 128MiB}
sinks:
  - kafka: {topic: out}
  - archive: {dir: /tmp/arc, max_file_age: 1m, compression: snappy}
`)
	t.Setenv("TFLO_SOURCE_KAFKA_TOPIC", "trades")
	t.Setenv("TFLO_LOG_LEVEL", "")
	t.Setenv("KAFKA_PW", "hunter2")
	t.Setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
	out, _ := printConfig(t, "--config", cfg, "--pipeline", specPath)
	requireLines(t, out,
		`(?m)^worker_id = "w1" +# `+regexp.QuoteMeta(cfg)+`:1$`,
		`(?m)^coordination\.nats_url = "nats://u:xxxxx@nats:4222" +# `+regexp.QuoteMeta(cfg)+`:3$`,
		`(?m)^coordination\.lease_ttl = 10s +# default$`,
		`(?m)^log\.level = "info" +# env TFLO_LOG_LEVEL$`, // "" clears the key: the default applies
		`(?m)^source\.kafka\.topic = "trades" +# env TFLO_SOURCE_KAFKA_TOPIC$`,
		`(?m)^source\.kafka\.dead_letter_topic = "trades\.dlq" +# default$`,
		`(?m)^decoder = reading +# default$`, // none named: reading runs
		`(?m)^source\.kafka\.brokers = \[k:9092\] +# `+regexp.QuoteMeta(specPath)+`:4$`,
		`(?m)^source\.kafka\.security\.sasl\.password_env = "KAFKA_PW" +# `+regexp.QuoteMeta(specPath)+`:6$`,
		`(?m)^graph\.nodes\[0\]\.params\.window = 3 +# `+regexp.QuoteMeta(specPath)+`:10$`,
		`(?m)^checkpoint\.interval = 10s +# default$`,
		`(?m)^checkpoint\.stage_timeout = 15s +# default$`,
		`(?m)^graph\.outputs = \[sma\] +# default$`,
		`(?m)^sinks\[0\]\.kafka\.brokers = \[k:9092\] +# default$`,
		`(?m)^sinks\[0\]\.kafka\.format = "json" +# default$`,
		`(?m)^sinks\[0\]\.kafka\.max_buffered = 10000 +# default$`,
		`(?m)^sinks\[1\]\.archive\.target_file_size = 128MiB +# default$`,
		`(?m)^sinks\[1\]\.archive\.max_file_age = 1m0s +# `+regexp.QuoteMeta(specPath)+`:14$`,
		`(?m)^sinks\[1\]\.archive\.compression = snappy +# `+regexp.QuoteMeta(specPath)+`:14$`,
		`(?m)^temporal\.address = "" +# default$`,
		`(?m)^#   address = "temporal\.example:7233" +# env TEMPORAL_ADDRESS$`,
		`(?m)^#   namespace = "default" +# default$`,
	)
	require.NotContains(t, out, "hunter2")
	require.NotContains(t, out, "pw-secret")

	// A dead-letter sink of the spec's, with its defaults.
	data, err := os.ReadFile(specPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(specPath, append(data, "dead_letter:\n  kafka: {topic: bad}\n"...), 0o600))
	out, _ = printConfig(t, "--config", cfg, "--pipeline", specPath)
	requireLines(t, out,
		`(?m)^dead_letter\.kafka\.topic = "bad" +# `+regexp.QuoteMeta(specPath)+`:16$`,
		`(?m)^dead_letter\.kafka\.brokers = \[k:9092\] +# default$`,
		`(?m)^dead_letter\.kafka\.max_buffered = 10000 +# default$`,
	)
}

// TestPrintConfigShowsTheDecoder: --print-config left the spec's decoder
// out (its fields are no keys), so a json decoder's key and time fields,
// which decide what every record is read as, showed nowhere.
func TestPrintConfigShowsTheDecoder(t *testing.T) {
	specPath := writeFile(t, "p.yaml", `name: trades
source:
  kafka: {brokers: [k:9092], topic: trades}
decoder:
  json: {key: symbol, time: ts}
graph:
  inputs: [price]
  nodes:
    - {name: sma, type: sma, inputs: [price], params: {window: 3}}
`)
	out, _ := printConfig(t, "--pipeline", specPath)
	require.Regexp(t, `(?m)^decoder = \{json: \{key: symbol, time: ts\}\} +# `+regexp.QuoteMeta(specPath)+`:5$`, out)
}

// TestPrintConfigShowsTheDefaultsThatRun: keys left unset printed
// worker_id = "" and log.level = "" (# default), while the worker names
// itself by the host name and logs at info as text.
func TestPrintConfigShowsTheDefaultsThatRun(t *testing.T) {
	specPath := writeFile(t, "p.yaml", tradesSpec+`state: {dir: /tmp/x, memory: 128MiB}
sinks:
  - kafka: {topic: out}
`)
	for _, k := range []string{"TFLO_WORKER_ID", "TFLO_LOG_LEVEL", "TFLO_LOG_FORMAT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	host, err := os.Hostname()
	require.NoError(t, err)
	out, _ := printConfig(t, "--pipeline", specPath)
	requireLines(t, out,
		`(?m)^worker_id = "" +# default: the host name, `+regexp.QuoteMeta(fmt.Sprintf("%q", host))+`$`,
		`(?m)^log\.level = "info" +# default$`,
		`(?m)^log\.format = "text" +# default$`,
	)
}

// TestPrintConfigShowsTheLimitsThatRun: the limits a spec leaves out
// printed as limits.key_pattern = "", max_key_bytes = 0, max_abs_value =
// 0 and max_ts_skew = 0s (# default), while the run checks every record
// against streaming's defaults (the pattern, 128 bytes, 1e15, an hour);
// a limit the spec sets prints as set.
func TestPrintConfigShowsTheLimitsThatRun(t *testing.T) {
	specPath := writeFile(t, "p.yaml", strings.Replace(tradesSpec, "graph:\n", "limits: {max_abs_value: 1e9}\ngraph:\n", 1)) // limits on line 4
	out, _ := printConfig(t, "--pipeline", specPath)
	requireLines(t, out,
		`(?m)^limits\.key_pattern = "`+regexp.QuoteMeta(streaming.DefaultKeyPattern)+`" +# default$`,
		`(?m)^limits\.max_key_bytes = 128 +# default$`,
		`(?m)^limits\.max_abs_value = 1e\+09 +# `+regexp.QuoteMeta(specPath)+`:4$`,
		`(?m)^limits\.max_ts_skew = 1h0m0s +# default$`,
		`(?m)^limits\.max_ts_age = 0s +# default$`, // 0: no bound, the default
		`(?m)^limits\.ts_unit = 1ms +# default$`,
	)
}

// TestPrintConfigShowsTheNodesDefaultParameters: a node's parameters
// the spec left out showed nowhere, though the run builds the node with
// its type's defaults (the SMA's warmup, full: no output before the
// window is full; threshold_cross's dwell and level); they print as
// defaults, beside the parameters the spec set.
func TestPrintConfigShowsTheNodesDefaultParameters(t *testing.T) {
	specPath := writeFile(t, "p.yaml", tradesSpec+"    - {name: up, type: threshold_cross, inputs: [sma], params: {threshold: 20, dwell: 2}}\n")
	out, _ := printConfig(t, "--pipeline", specPath)
	requireLines(t, out,
		`(?m)^graph\.nodes\[0\]\.params\.window = 3 +# `+regexp.QuoteMeta(specPath)+`:7$`,
		`(?m)^graph\.nodes\[0\]\.params\.warmup = "full" +# default$`,
		`(?m)^graph\.nodes\[1\]\.params\.dwell = 2 +# `+regexp.QuoteMeta(specPath)+`:8$`,
		`(?m)^graph\.nodes\[1\]\.params\.level = "value" +# default$`,
	)
}

// TestPrintConfigShowsStaticMembershipOffWithoutAWorkerID: a worker
// without worker_id (named by its host name) joins its Kafka group as a
// dynamic member whatever source.kafka.static_membership says, but
// --print-config printed static_membership = true; it prints false and
// why, and true once worker_id is set.
func TestPrintConfigShowsStaticMembershipOffWithoutAWorkerID(t *testing.T) {
	specPath := writeFile(t, "p.yaml", tradesSpec)
	printed := func() string {
		out, _ := printConfig(t, "--pipeline", specPath)
		return out
	}
	t.Setenv("TFLO_WORKER_ID", "")
	os.Unsetenv("TFLO_WORKER_ID")
	require.Regexp(t, `(?m)^source\.kafka\.static_membership = false +# default: off, worker_id is empty \(a worker named by its host name joins as a dynamic member\)$`, printed())
	t.Setenv("TFLO_WORKER_ID", "w1")
	require.Regexp(t, `(?m)^source\.kafka\.static_membership = true +# default$`, printed())
}

// TestPrintConfigWithoutASpec: --print-config without --pipeline printed
// the configuration and then failed (exit 2, "--pipeline FILE is
// required"); it prints the configuration, says no spec was given and
// exits 0.
func TestPrintConfigWithoutASpec(t *testing.T) {
	t.Setenv("TFLO_WORKER_ID", "w9")
	out, errOut := printConfig(t)
	require.Empty(t, errOut)
	require.Regexp(t, `(?m)^worker_id = "w9" +# env TFLO_WORKER_ID$`, out)
	require.Contains(t, out, "# pipeline spec: none (add --pipeline FILE to print it too)")
}

// dashboard is deploy/grafana/tflo.json.
var dashboard = filepath.Join("..", "..", "deploy", "grafana", "tflo.json")

var (
	promGroupings = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promBraces    = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]|"[^"]*"`)
	promIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	sampleName    = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)
)

// dashboardMetrics returns the metric names the dashboard's PromQL
// queries read, each with the panel that reads it.
func dashboardMetrics(t *testing.T) map[string]string {
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(dashboard)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &d))
	names := map[string]string{}
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			e := promBraces.ReplaceAllString(promGroupings.ReplaceAllString(tg.Expr, ""), "")
			for _, id := range promIdent.FindAllString(e, -1) {
				if strings.HasSuffix(id, "(") || slices.Contains([]string{"bool", "offset"}, id) {
					continue // a function, or a keyword
				}
				names[strings.TrimSpace(id)] = p.Title
			}
		}
	}
	return names
}

// requireDashboardMetricsExist checks every metric the dashboard reads is
// in exposition (the text of a /metrics scrape).
func requireDashboardMetricsExist(t *testing.T, exposition string) {
	have := map[string]bool{}
	for _, m := range sampleName.FindAllStringSubmatch(exposition, -1) {
		have[m[1]] = true
	}
	names := dashboardMetrics(t)
	require.GreaterOrEqual(t, len(names), 20, "the dashboard reads the demo's metrics: %v", names)
	for name, panel := range names {
		require.True(t, have[name], "panel %q reads %s, which no worker exposes", panel, name)
	}
}

// exposition lists the sample names of what reg gathers, one a line, in
// the form sampleName reads.
func exposition(t *testing.T, reg prometheus.Gatherer) string {
	fams, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, f := range fams {
		fmt.Fprintf(&b, "%s 0\n", f.GetName())
		if f.GetType() == dto.MetricType_HISTOGRAM {
			fmt.Fprintf(&b, "%[1]s_bucket 0\n%[1]s_sum 0\n%[1]s_count 0\n", f.GetName())
		}
	}
	return b.String()
}

// TestProbe: --probe is the containers' health check (the image has no
// curl): exit 0 when the URL answers 200, 1 with the reason otherwise,
// whatever the environment holds.
func TestProbe(t *testing.T) {
	ready := &worker.Readiness{}
	ms, err := worker.ServeMetrics("127.0.0.1:0", prometheus.NewRegistry(), worker.WithReadiness(ready))
	require.NoError(t, err)
	defer ms.Close()
	readyz := strings.TrimSuffix(ms.URL, "/metrics") + "/readyz"
	t.Setenv("TFLO_NO_SUCH_KEY", "x") // not read: a probe loads no config
	probe := func(url string) (int, string) {
		var errOut bytes.Buffer
		return worker.RunMain(worker.PipelineMain(), []string{"--probe", url}, &errOut), errOut.String()
	}
	code, msg := probe(readyz)
	require.Equal(t, worker.ExitFailure, code)
	require.Contains(t, msg, "503 Service Unavailable: not ready: starting")
	code, _ = probe(strings.TrimSuffix(ms.URL, "/metrics") + "/healthz")
	require.Equal(t, worker.ExitOK, code, "alive while not ready")
	ready.Set(func(context.Context) error { return nil })
	code, msg = probe(readyz)
	require.Equal(t, worker.ExitOK, code, msg)
	// A check that does not answer (Temporal's health check hanging):
	// the probe reports the 503 saying what /readyz gave up on. Bug: the
	// probe's client gave up at /readyz's own 5s deadline, first, and
	// reported only "Client.Timeout exceeded".
	ready.Set(func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("temporal: %w", ctx.Err()) })
	code, msg = probe(readyz)
	require.Equal(t, worker.ExitFailure, code)
	require.Contains(t, msg, "503 Service Unavailable: not ready: temporal: context deadline exceeded")
	require.NoError(t, ms.Close())
	code, msg = probe(readyz)
	require.Equal(t, worker.ExitFailure, code)
	require.Contains(t, msg, "connection refused")
}

// TestNotReadyWhileASinkIsDown: a worker holding all its shards is still
// not ready while its InfluxDB sink does not answer; /readyz says which
// sink, and /healthz stays 200.
func TestNotReadyWhileASinkIsDown(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + ln.Addr().String()
	ln.Close()
	spec := writeFile(t, "down.yaml", fmt.Sprintf(`name: down
source:
  kafka: {brokers: [%q], topic: readings, session_timeout: 2s}
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 2}}
sinks:
  - influx: {url: %q, bucket: db/autogen}
state: {dir: %q, memory: 128MiB}
`, k.Addrs()[0], down, t.TempDir()))
	maddr := freePort(t)
	t.Setenv("TFLO_METRICS_ADDR", maddr)
	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() { done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec}, &errOut) }()
	base := "http://" + maddr
	require.Eventually(t, func() bool { return metric(t, base+"/metrics", "tflo_pipeline_owned_shards") == 1 }, 30*time.Second, 20*time.Millisecond, errOut.String())
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = get(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "sinks[0]: influx sink "+down)
	}, 30*time.Second, 50*time.Millisecond, "readyz: %s", body)
	code, _ := get(base + "/healthz")
	require.Equal(t, http.StatusOK, code)
	stopWithSIGTERM(t, done, &errOut, 60*time.Second)
}

// TestReadyFollowsTemporal: with Temporal configured, /readyz asks it for
// its health: a frozen server (SIGSTOP) makes the worker not ready,
// naming Temporal, and ready again once it answers.
func TestReadyFollowsTemporal(t *testing.T) {
	srv := temporaltest.Start(t)
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1}, devstack.KafkaTopic{Name: "readings.sma", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	maddr := freePort(t)
	for k, v := range map[string]string{"KAFKA_BROKERS": k.Addrs()[0], "STATE_DIR": t.TempDir(), "TFLO_WORKER_ID": "r1",
		"TFLO_TEMPORAL_ADDRESS": srv.HostPort, "TFLO_CONTROL_WORKER": "true", "TFLO_METRICS_ADDR": maddr} {
		t.Setenv(k, v)
	}
	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() {
		done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("sma-readings.yaml")}, &errOut)
	}()
	readyz := "http://" + maddr + "/readyz"
	require.Eventually(t, func() bool { c, _ := get(readyz); return c == http.StatusOK }, 60*time.Second, 50*time.Millisecond, errOut.String())

	require.NoError(t, syscall.Kill(srv.Pid(), syscall.SIGSTOP))
	stat := fmt.Sprintf("/proc/%d/stat", srv.Pid())
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(stat)
		_, after, _ := strings.Cut(string(b), ") ")
		return err == nil && strings.HasPrefix(after, "T")
	}, 10*time.Second, 5*time.Millisecond, "the server stopped")
	code, body := get(readyz)
	require.NoError(t, syscall.Kill(srv.Pid(), syscall.SIGCONT))
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "temporal:")
	require.Eventually(t, func() bool { c, _ := get(readyz); return c == http.StatusOK }, 60*time.Second, 50*time.Millisecond, "ready again once Temporal answers")
	stopWithSIGTERM(t, done, &errOut, 60*time.Second)
}

// TestCheckpointFailuresCounted: a shard whose durable store stops
// accepting checkpoints (its folder replaced by a file) counts each failed
// attempt in tflo_pipeline_checkpoint_failures_total.
func TestCheckpointFailuresCounted(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1}, devstack.KafkaTopic{Name: "readings.sma", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	durable := filepath.Join(t.TempDir(), "durable")
	maddr := freePort(t)
	for k, v := range map[string]string{"KAFKA_BROKERS": k.Addrs()[0], "STATE_DIR": t.TempDir(), "TFLO_STATE_DURABLE_DIR": durable,
		"TFLO_CHECKPOINT_INTERVAL": "100ms", "TFLO_METRICS_ADDR": maddr} {
		t.Setenv(k, v)
	}
	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() {
		done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("sma-readings.yaml")}, &errOut)
	}()
	url := "http://" + maddr + "/metrics"
	failures := `(?m)^tflo_pipeline_checkpoint_failures_total\{pipeline="sma-readings",shard="readings/0"\} (\S+)$`
	count := func() float64 {
		_, text := get(url)
		m := regexp.MustCompile(failures).FindStringSubmatch(text)
		if m == nil {
			return -1
		}
		var v float64
		fmt.Sscan(m[1], &v)
		return v
	}
	require.Eventually(t, func() bool { return metric(t, url, "tflo_pipeline_checkpoints_total") >= 2 }, 30*time.Second, 20*time.Millisecond, errOut.String())
	require.Zero(t, count(), "checkpoints succeed")
	// The worker writes checkpoints into the folder meanwhile (a removal
	// can find a file just written, the next checkpoint can make the
	// folder again): retry until a file stands in its place.
	require.Eventually(t, func() bool {
		return os.RemoveAll(durable) == nil && os.WriteFile(durable, []byte("not a folder"), 0o600) == nil
	}, 10*time.Second, 5*time.Millisecond, "replace the durable folder by a file")
	require.Eventually(t, func() bool { return count() >= 2 }, 30*time.Second, 20*time.Millisecond, "failed checkpoints are counted")

	require.NoError(t, os.Remove(durable)) // the final checkpoint may work again
	require.NoError(t, os.Mkdir(durable, 0o700))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop on SIGTERM")
	}
}

// TestCheckPrintsTheGraphAsItRuns: --check names the outputs the graph
// will have, defaults resolved (a spec that lists none gets every node no
// other node reads), not the spec's empty list, and where the dead
// letters go (the source's default, or dead_letter).
func TestCheckPrintsTheGraphAsItRuns(t *testing.T) {
	var code int
	var errOut bytes.Buffer
	out := stdout(t, func() {
		code = worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut)
	})
	require.Equal(t, worker.ExitOK, code, errOut.String())
	require.Contains(t, out, `pipeline "sma-readings", source kafka topic readings, 1 node, outputs [sma], 1 sink, dead letters to kafka topic readings.dlq: ok`)
	out = stdout(t, func() {
		code = worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("iot-portal-edge.yaml"), "--check"}, &errOut)
	})
	require.Equal(t, worker.ExitOK, code, errOut.String())
	require.Regexp(t, `source mqtt \[sensors/#\], .* dead letters to mqtt topic \S+: ok`, out)
	t.Setenv("TFLO_DEAD_LETTER_KAFKA_TOPIC", "readings.bad")
	out = stdout(t, func() {
		code = worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut)
	})
	require.Equal(t, worker.ExitOK, code, errOut.String())
	require.Contains(t, out, `dead letters to kafka topic readings.bad: ok`)

	// A graph built in Go by an edit (workers/worker.EditPipeline) is
	// what --check counts and names the outputs of.
	edit := func(p *pipeline.Pipeline) error {
		g, err := streaming.NewBuilder().Input("value").
			Node("fast", func() streaming.Operator { return ops.NewSMA(3) }, "value").
			Node("slow", func() streaming.Operator { return ops.NewSMA(9) }, "value").
			Build()
		p.Graph.Nodes, p.Graph.Outputs, p.Graph.Built = nil, nil, g
		return err
	}
	out = stdout(t, func() {
		code = worker.RunMain(worker.PipelineMain(edit), []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut)
	})
	require.Equal(t, worker.ExitOK, code, errOut.String())
	require.Contains(t, out, `2 nodes, outputs [fast slow], 1 sink`)
}
