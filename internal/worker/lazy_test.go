package worker_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
)

// TestWorkerStartsWithoutTemporal (issue 13 §4): with a Temporal address
// nothing answers on, the worker — serving backfills too — starts anyway
// and runs its hot path (the client is lazy; the Temporal workers and the
// backfill worker start in the background, and the shards checkpoint
// locally meanwhile). It used to fail after 30 s dialing Temporal.
func TestWorkerStartsWithoutTemporal(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1}, devstack.KafkaTopic{Name: "readings.sma", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", t.TempDir())
	cfg := worker.PipelineConfig{WorkerID: "lazy1", Temporal: temporalclient.Config{Address: dead, KeyPath: "temporal"}, ControlWorker: true,
		Backfill: worker.BackfillConfig{InfluxURL: "http://" + dead}} // backfills served too: their worker starts once Temporal answers
	p, err := pipeline.Load(spec("sma-readings.yaml"))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.RunPipeline(ctx, p, cfg, slog.New(slog.DiscardHandler), reg) }()
	owned := func() float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == "tflo_pipeline_owned_shards" && len(f.GetMetric()) > 0 {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return 0
	}
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the worker stopped while Temporal was unreachable: %v", err)
		default:
		}
		return owned() == 1
	}, 20*time.Second, 50*time.Millisecond, "the worker did not take its partition while Temporal was unreachable")
	cancel()
	require.NoError(t, <-done)
}
