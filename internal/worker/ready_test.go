package worker

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/pipeline"
)

// TestNotReadyWhileDraining: once the worker is told to stop, /readyz's
// check says it drains, from the moment it is told until it exits. Bug:
// it asked the pipeline worker alone, which answered "ready" while the
// worker drained (still holding its partitions, or between a
// partition's revoke and the next), and "1 of 2 owned partitions
// restored" or "client closed" otherwise.
func TestNotReadyWhileDraining(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 2}, devstack.KafkaTopic{Name: "readings.sma", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", t.TempDir())
	p, err := pipeline.Load(filepath.Join("..", "..", "workers", "pipelines", "sma-readings.yaml"))
	require.NoError(t, err)
	ready := &Readiness{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runPipeline(ctx, p, PipelineConfig{}, slog.New(slog.DiscardHandler), nil, ready) }()
	check := func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		return ready.Check(cctx)
	}
	require.Eventually(t, func() bool { return check() == nil }, 30*time.Second, 10*time.Millisecond, "the worker never got ready: %v", check())

	cancel() // SIGINT/SIGTERM
	err = check()
	require.Error(t, err, "ready while draining")
	require.Contains(t, err.Error(), "draining")
	require.NoError(t, <-done)
	require.ErrorContains(t, check(), "draining", "once stopped, until the process exits")
}
