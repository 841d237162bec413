package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/devstack"
	iworker "github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workers/worker"
)

// spec is an SMA(3) job over Kafka topic readings; its decoder, reading,
// is the one the edit below replaces.
const spec = `name: csv-sma
source:
  kafka:
    brokers: ["${KAFKA_BROKERS:-localhost:9092}"]
    topic: readings
decoder: reading
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3, warmup: partial}}
sinks:
  - kafka: {topic: readings.sma}
state:
  memory: 96MiB
`

// specFile writes body to a spec file of the test's and returns its path.
func specFile(t *testing.T, body string) string {
	file := filepath.Join(t.TempDir(), "csv-sma.yaml")
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	return file
}

// csvDecoder reads "sensor,ts,value" lines: what no spec decoder reads.
var csvDecoder = pipeline.DecoderFunc(func(m pipeline.Message, r *pipeline.Record) error {
	f := strings.Split(string(m.Value), ",")
	if len(f) != 3 {
		return fmt.Errorf("want sensor,ts,value; got %d fields", len(f))
	}
	ts, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fmt.Errorf("ts: %w", err)
	}
	v, err := strconv.ParseFloat(f[2], 64)
	if err != nil {
		return fmt.Errorf("value: %w", err)
	}
	r.Key, r.TS, r.Inputs[0] = []byte(f[0]), ts, streaming.Float(v)
	return nil
})

// TestEditPipelineRunsAGoDecoderAndSink: Main with EditPipeline runs the
// spec with what it cannot say, a decoder and a sink written in Go: CSV
// records come out as the SMA the reference computes, on the spec's
// Kafka sink and on the added sink alike; a line the decoder refuses is
// a dead letter on the spec's dead-letter topic; SIGTERM drains Main to
// exit code 0.
func TestEditPipelineRunsAGoDecoderAndSink(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 2},
		devstack.KafkaTopic{Name: "readings.sma", Partitions: 2}, devstack.KafkaTopic{Name: "readings.dlq", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	file := specFile(t, spec)
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("GOMEMLIMIT", "1GiB") // Main owns the process: leave the test's memory limit alone

	mem := streaming.NewMemorySink()
	done := make(chan int, 1)
	go func() {
		done <- worker.Main([]string{"--pipeline", file}, worker.EditPipeline(func(p *pipeline.Pipeline) error {
			p.Decoder = csvDecoder
			p.Sinks = append(p.Sinks, pipeline.Use(mem))
			return nil
		}))
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("readings", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	want := map[string]float64{} // "sensor@ts" → SMA(3), partial
	for s := range 4 {
		sensor := fmt.Sprintf("s-%d", s)
		var hist []float64
		for i := range 10 {
			v := float64(10*s + i*i)
			hist = append(hist, v)
			w := hist[max(0, len(hist)-3):]
			sum := 0.0
			for _, x := range w {
				sum += x
			}
			want[fmt.Sprintf("%s@%d", sensor, 1000+i)] = sum / float64(len(w))
			require.NoError(t, pub.Publish(ctx, sensor, fmt.Appendf(nil, "%s,%d,%v", sensor, 1000+i, v)))
		}
	}
	require.NoError(t, pub.Publish(ctx, "s-0", []byte("s-0;1010;1")))
	require.NoError(t, pub.Flush(ctx))

	read := func(topic string, n int) []*kgo.Record {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		defer cl.Close()
		var recs []*kgo.Record
		for len(recs) < n {
			fs := cl.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "read %d of %d records of %s", len(recs), n, topic)
			recs = append(recs, fs.Records()...)
		}
		return recs
	}
	for _, r := range read("readings.sma", len(want)) {
		require.Contains(t, string(r.Value), `"name":"sma"`)
	}
	dlq := read("readings.dlq", 1)
	require.Equal(t, "s-0;1010;1", string(dlq[0].Value))
	var reason string
	for _, h := range dlq[0].Headers {
		if strings.Contains(h.Key, "reason") || strings.Contains(h.Key, "error") {
			reason = string(h.Value)
		}
	}
	require.Contains(t, reason, "want sensor,ts,value; got 1 fields")

	require.Eventually(t, func() bool { return len(mem.Outputs()) == len(want) }, time.Minute, 10*time.Millisecond)
	for _, o := range mem.Outputs() {
		w, ok := want[fmt.Sprintf("%s@%d", o.Key, o.TS/int64(time.Millisecond))]
		require.True(t, ok, "unexpected output %+v", o)
		require.InDelta(t, w, o.Value, 1e-9, "%+v", o)
	}

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, worker.ExitOK, code)
	case <-ctx.Done():
		t.Fatal("Main did not stop on SIGTERM")
	}
}

// TestEditPipelineErrorsAreUsageErrors: an edit's error, and a pipeline
// an edit left invalid, stop the worker before it runs with exit code 2
// and a line naming the spec; --check checks the edited pipeline, and so
// does --print-config (it printed a pipeline an edit left invalid and
// exited 0).
func TestEditPipelineErrorsAreUsageErrors(t *testing.T) {
	file := specFile(t, spec)
	run := func(edit func(*pipeline.Pipeline) error) (int, string) {
		var stderr bytes.Buffer
		code := iworker.RunMain(iworker.PipelineMain(edit), []string{"--pipeline", file, "--check"}, &stderr)
		return code, stderr.String()
	}
	var stderr bytes.Buffer
	code := iworker.RunMain(iworker.PipelineMain(func(p *pipeline.Pipeline) error { p.Graph.Nodes = nil; return nil }),
		[]string{"--pipeline", file, "--print-config"}, &stderr)
	require.Equal(t, worker.ExitUsage, code, "--print-config: %s", &stderr)
	require.Contains(t, stderr.String(), file+" as edited: ")
	require.Contains(t, stderr.String(), "graph has no nodes")

	code, out := run(func(*pipeline.Pipeline) error { return errors.New("no CSV schema for this topic") })
	require.Equal(t, worker.ExitUsage, code)
	require.Contains(t, out, file+": no CSV schema for this topic")

	code, out = run(func(p *pipeline.Pipeline) error { p.Graph.Nodes = nil; return nil })
	require.Equal(t, worker.ExitUsage, code)
	require.Contains(t, out, file+" as edited: ")
	require.Contains(t, out, "graph has no nodes")

	code, out = run(func(p *pipeline.Pipeline) error { p.Decoder = csvDecoder; return nil })
	require.Equal(t, worker.ExitOK, code, "%s", out)
}

// TestEditProblemsComeWithTheConfigs: the problems a program's edits
// cause (an edit's error, a pipeline an edit left invalid) were reported
// only once the worker config's problems were fixed, on the next run;
// they come in one error with them. An edit runs on a spec that loads:
// the spec's problems come with the config's, and the edits' once those
// are fixed.
func TestEditProblemsComeWithTheConfigs(t *testing.T) {
	t.Setenv("TFLO_METRICS_ADDR", "nohost")
	const configProblem = `metrics.addr "nohost": want host:port`
	check := func(file string, edit func(*pipeline.Pipeline) error) string {
		var stderr bytes.Buffer
		require.Equal(t, worker.ExitUsage, iworker.RunMain(iworker.PipelineMain(edit), []string{"--pipeline", file, "--check"}, &stderr))
		return stderr.String()
	}
	file := specFile(t, spec)
	out := check(file, func(*pipeline.Pipeline) error { return errors.New("no CSV schema for this topic") })
	require.Contains(t, out, configProblem)
	require.Contains(t, out, file+": no CSV schema for this topic")
	out = check(file, func(p *pipeline.Pipeline) error { p.Graph.Nodes = nil; return nil })
	require.Contains(t, out, configProblem)
	require.Contains(t, out, file+" as edited: ")
	require.Contains(t, out, "graph has no nodes")

	broken := specFile(t, strings.Replace(spec, "type: sma", "type: smaa", 1))
	edited := false
	out = check(broken, func(*pipeline.Pipeline) error { edited = true; return nil })
	require.Contains(t, out, configProblem)
	require.Contains(t, out, `unknown operator type "smaa"`)
	require.False(t, edited, "an edit ran on a spec that did not load")
}

// TestPrintConfigShowsTheEdits: --print-config prints the spec's keys
// with their origins, then what the program's edits made of the
// pipeline, which has no keys: the decoder and the sinks as Go values.
func TestPrintConfigShowsTheEdits(t *testing.T) {
	file := specFile(t, spec)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	out := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		out <- b.String()
	}()
	stdout := os.Stdout
	os.Stdout = w
	var stderr bytes.Buffer
	code := iworker.RunMain(iworker.PipelineMain(func(p *pipeline.Pipeline) error {
		p.Decoder = csvDecoder
		p.Sinks = append(p.Sinks, pipeline.Use(streaming.NewMemorySink()))
		return nil
	}), []string{"--pipeline", file, "--print-config"}, &stderr)
	os.Stdout = stdout
	require.NoError(t, w.Close())
	printed := <-out
	require.Equal(t, worker.ExitOK, code, "%s", &stderr)
	require.Regexp(t, `(?m)^sinks\[0\]\.kafka\.topic = "readings.sma" +# `+regexp.QuoteMeta(file)+`:12$`, printed)
	require.Contains(t, printed, `# after the program's edits (EditPipeline)
decoder = pipeline.DecoderFunc
sinks[0] = pipeline.KafkaSink
sinks[1] = pipeline.Use(*streaming.MemorySink)
`)
}
