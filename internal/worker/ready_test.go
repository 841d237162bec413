package worker

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/logtest"
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

// TestDrainingWhileWaitingForTheCoordinationStore: a worker told to stop
// while it waits for its coordination store (NATS down at its start)
// says it drains, as one told to stop later does. Bug: /readyz said
// "starting" until the process exited, as if it were still coming up.
func TestDrainingWhileWaitingForTheCoordinationStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there: NATS is down
	t.Setenv("KAFKA_BROKERS", "127.0.0.1:1")
	t.Setenv("STATE_DIR", t.TempDir())
	p, err := pipeline.Load(filepath.Join("..", "..", "workers", "pipelines", "sma-readings.yaml"))
	require.NoError(t, err)
	ready := &Readiness{}
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	cfg := PipelineConfig{WorkerID: "w1", Coordination: CoordinationConfig{NATSURL: "nats://" + addr, Job: "plant"}}
	go func() { done <- runPipeline(ctx, p, cfg, slog.New(slog.NewTextHandler(logs, nil)), nil, ready) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "coordination store unreachable") }, 30*time.Second, 10*time.Millisecond, "the worker waits for NATS")
	require.ErrorContains(t, ready.Check(context.Background()), "starting")

	cancel() // SIGINT/SIGTERM
	require.ErrorContains(t, ready.Check(context.Background()), "draining", "told to stop while it waits")
	require.NoError(t, <-done)
	require.ErrorContains(t, ready.Check(context.Background()), "draining", "once stopped, until the process exits")
}
