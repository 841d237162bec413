package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/worker"
)

// TestSMAJobFromSpec runs the simplest job — per-sensor SMA(10) over JSON
// readings from Kafka back to a Kafka topic, emitting during warm-up —
// the way an operator runs it: the worker binary's main on
// workers/pipelines/sma-readings.yaml with environment variables, no Go
// code of the job's own. SIGTERM drains it; every SMA on the output topic
// matches a reference computed in the test.
func TestSMAJobFromSpec(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 4},
		devstack.KafkaTopic{Name: "readings.sma", Partitions: 4}, devstack.KafkaTopic{Name: "readings.dlq", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", filepath.Join(t.TempDir(), "state"))

	// Readings of 12 sensors, 50 each, and the reference: the mean of
	// the last min(n, 10) values of the sensor.
	type reading struct {
		Sensor string  `json:"sensor"`
		TS     int64   `json:"ts"`
		Value  float64 `json:"value"`
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var rs []reading
	want := map[outKey]outVal{}
	hist := map[string][]float64{}
	for i := range 50 {
		for s := range 12 {
			r := reading{Sensor: fmt.Sprintf("sensor-%02d", s), TS: 1_700_000_000_000 + int64(i)*1000, Value: 20 + 5*rng.NormFloat64()}
			rs = append(rs, r)
			h := append(hist[r.Sensor], r.Value)
			hist[r.Sensor] = h
			sum := 0.0
			w := h[max(0, len(h)-10):]
			for _, v := range w {
				sum += v
			}
			want[outKey{r.Sensor, "sma", r.TS}] = outVal{value: sum / float64(len(w))}
		}
	}

	done := make(chan int, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", specPath("sma-readings.yaml")}, t.Output())
	}()
	// A failure before the SIGTERM below leaves the worker running after
	// the test (logging to t.Output): stop it the same way and wait. The
	// test's own handler keeps a SIGTERM the worker does not yet listen
	// for from killing the test binary; it is sent again until the
	// worker exits. (Deferred: before Kafka's Close.)
	defer func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		defer signal.Stop(sig)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(time.Minute)
		for {
			select {
			case <-exited:
				return
			case <-deadline:
				t.Errorf("the worker did not stop on SIGTERM within a minute")
				return
			case <-tick.C:
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("readings", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	for _, r := range rs {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, pub.Publish(ctx, r.Sensor, b))
	}
	require.NoError(t, pub.Flush(ctx))

	got := map[outKey]outVal{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...), kgo.ConsumeTopics("readings.sma"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	for n := 0; n < len(want); {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d outputs", n, len(want))
		fs.EachRecord(func(r *kgo.Record) {
			var o struct {
				Key, Name string
				TS        int64
				Value     float64
			}
			require.NoError(t, json.Unmarshal(r.Value, &o), "%s", r.Value)
			require.Equal(t, o.Key, string(r.Key))
			got[outKey{o.Key, o.Name, o.TS}] = outVal{value: o.Value}
			n++
		})
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, worker.ExitOK, code)
	case <-time.After(time.Minute):
		t.Fatal("worker did not stop on SIGTERM")
	}
	requireSameOutputs(t, want, got, "readings.sma")
}
