package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// TestProgramRunsItsOwnOperator runs the built program the way a user
// does: `--check` resolves anomaly.yaml's zscore node and alerts sink
// where the stock worker refuses them, `--operators` lists them beside
// tflo's own; then the program runs the spec against a Kafka cluster
// (kfake, over TCP) with environment variables only, every z-score on the
// output topic matches the two-pass reference, SIGTERM drains it to exit
// code 0 with no error logged, and the alerts file holds every anomaly
// once and nothing else.
func TestProgramRunsItsOwnOperator(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, toolbin.GoBuild(bin, "", "./workers/examples/anomaly", "./workers/cmd/worker"))
	run := func(ctx context.Context, name string, env []string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
		cmd.WaitDelay = 5 * time.Second
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, err := run(ctx, "anomaly", nil, "--pipeline", "anomaly.yaml", "--check").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `pipeline "anomaly", source kafka topic readings, 1 node, outputs [z], 2 sinks, dead letters to kafka topic readings.dlq: ok`)
	out, err = run(ctx, "worker", nil, "--pipeline", "anomaly.yaml", "--check").CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), `line 18: sinks[1].alerts: unknown key (known here: kafka, influx, archive)`)
	spec, err := os.ReadFile("anomaly.yaml")
	require.NoError(t, err)
	noAlerts := filepath.Join(t.TempDir(), "no-alerts.yaml")
	require.NoError(t, os.WriteFile(noAlerts, bytes.Replace(spec, []byte("  - alerts:"), []byte("  # - alerts:"), 1), 0o644))
	out, err = run(ctx, "worker", nil, "--pipeline", noAlerts, "--check").CombinedOutput()
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), `graph node "z" (line 15): unknown operator type "zscore"`)
	noFile := filepath.Join(t.TempDir(), "no-file.yaml")
	require.NoError(t, os.WriteFile(noFile, regexp.MustCompile(`alerts: \{file: .*\}`).ReplaceAll(spec, []byte("alerts: {mode: anomaly}")), 0o644))
	out, err = run(ctx, "anomaly", nil, "--pipeline", noFile, "--check").CombinedOutput()
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), `line 18: sinks[1].alerts: file is required`)

	out, err = run(ctx, "anomaly", nil, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.HasPrefix(string(out), "anomaly "), "--version names the program: %s", out)
	out, err = run(ctx, "anomaly", nil, "--operators").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "zscore — How unusual a value is for its key")
	require.Contains(t, string(out), "sma — ", "the catalogs are listed beside it")
	require.Regexp(t, `(?m)^  alerts +The outputs of one mode \(anomaly\) as JSON lines`, string(out), "and its sink beside the built-in ones")
	require.Regexp(t, `(?m)^  kafka +A Kafka topic`, string(out))
	out, err = run(ctx, "anomaly", []string{"ALERTS_FILE=/srv/alerts.jsonl"}, "--pipeline", "anomaly.yaml", "--print-config").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `(?m)^sinks\[1\]\.alerts\.file = "/srv/alerts.jsonl" +# anomaly.yaml:18$`, string(out))
	require.Regexp(t, `(?m)^sinks\[1\]\.alerts\.mode = "anomaly" +# default$`, string(out))
	out, err = run(ctx, "worker", nil, "--operators").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "zscore")
	require.NotContains(t, string(out), "alerts")

	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 3},
		devstack.KafkaTopic{Name: "readings.anomaly", Partitions: 3}, devstack.KafkaTopic{Name: "readings.dlq", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()

	// 8 sensors, 60 readings each, a spike now and then; the reference
	// z-scores from their definition, keyed like the sink's records.
	type reading struct {
		Sensor string  `json:"sensor"`
		TS     int64   `json:"ts"`
		Value  float64 `json:"value"`
	}
	type key struct {
		sensor string
		ts     int64
	}
	type val struct {
		z    float64
		mode string
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var rs []reading
	hist := map[string][]float64{}
	want := map[key]val{}
	anomalies := 0
	for i := range 60 {
		for s := range 8 {
			r := reading{Sensor: fmt.Sprintf("sensor-%d", s), TS: 1_700_000_000_000 + int64(i)*1000, Value: 20 + rng.NormFloat64()}
			if (i+s)%23 == 22 {
				r.Value += 12
			}
			rs = append(rs, r)
			h := append(hist[r.Sensor], r.Value)
			hist[r.Sensor] = h
			if z, ok := zscoreRef(h, len(h)-1, 10); ok {
				mode := "normal"
				if math.Abs(z) > 2.5 { // anomaly.yaml's threshold
					mode = "anomaly"
					anomalies++
				}
				want[key{r.Sensor, r.TS}] = val{z, mode}
			}
		}
	}
	require.Positive(t, anomalies)

	var stderr bytes.Buffer
	alertsFile := filepath.Join(t.TempDir(), "alerts.jsonl")
	cmd := run(ctx, "anomaly", []string{"KAFKA_BROKERS=" + k.Addrs()[0], "STATE_DIR=" + t.TempDir(), "ALERTS_FILE=" + alertsFile}, "--pipeline", "anomaly.yaml")
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("readings", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	for _, r := range rs {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, pub.Publish(ctx, r.Sensor, b))
	}
	require.NoError(t, pub.Flush(ctx))

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...), kgo.ConsumeTopics("readings.anomaly"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	got := map[key]val{}
	for n := 0; n < len(want); {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d outputs; the program's log:\n%s", n, len(want), &stderr)
		fs.EachRecord(func(r *kgo.Record) {
			var o struct {
				Key, Name, Mode string
				TS              int64
				Value           float64
			}
			require.NoError(t, json.Unmarshal(r.Value, &o), "%s", r.Value)
			require.Equal(t, "z", o.Name)
			got[key{o.Key, o.TS}] = val{o.Value, o.Mode}
			n++
		})
	}
	for k, w := range want {
		g, ok := got[k]
		require.True(t, ok, "no z-score for %v", k)
		require.InDelta(t, w.z, g.z, 1e-9*math.Max(1, math.Abs(w.z)), "%v", k)
		require.Equal(t, w.mode, g.mode, "%v (z %v)", k, w.z)
	}
	require.Len(t, got, len(want))

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "exit status; the program's log:\n%s", &stderr)
	case <-ctx.Done():
		t.Fatalf("the program did not stop on SIGTERM; its log:\n%s", &stderr)
	}
	require.NotContains(t, stderr.String(), "level=ERROR")
	require.Contains(t, stderr.String(), "final_checkpoint=true", "a drain takes its final checkpoints")

	// The alerts sink wrote every anomaly, once, and nothing else.
	data, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, anomalies, "%s", data)
	for _, l := range lines {
		var a Alert
		require.NoError(t, json.Unmarshal([]byte(l), &a), "%s", l)
		w, ok := want[key{a.Key, a.TS}]
		require.True(t, ok, "an alert for no reading: %s", l)
		require.Equal(t, "anomaly", w.mode, "%s", l)
		require.Equal(t, "z", a.Name)
		require.InDelta(t, w.z, a.Value, 1e-9*math.Max(1, math.Abs(w.z)), "%s", l)
		delete(want, key{a.Key, a.TS}) // a second alert for it fails above
	}
}
