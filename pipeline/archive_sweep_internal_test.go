package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// TestArchiveSinkOpensWithoutWaitingForItsSweep: opening an archive sink
// on a local archive returns while its sweep of stale temp files is still
// running, and closing the sink stops the sweep and waits for it. Bug:
// the sweep ran inside OpenSink, walking the whole archive (every
// pipeline's folders) for up to 10s, and that came out of the 30s a
// worker allows for opening its state store and sinks at every start.
func TestArchiveSinkOpensWithoutWaitingForItsSweep(t *testing.T) {
	started, stopped := make(chan struct{}), make(chan struct{})
	old := sweepArchiveTemps
	t.Cleanup(func() { sweepArchiveTemps = old })
	sweepArchiveTemps = func(_ *parquet.LocalArchive, ctx context.Context) (int, error) {
		defer close(stopped)
		close(started)
		<-ctx.Done() // a sweep of a tree too large: until the sink closes
		return 0, ctx.Err()
	}
	opened := make(chan error, 1)
	var s interface{ Close(context.Context) error }
	go func() {
		sink, err := ArchiveSink{Dir: t.TempDir()}.OpenSink(context.Background(), SinkEnv{Pipeline: "plant", Source: &KafkaSource{}})
		s = sink
		opened <- err
	}()
	select {
	case err := <-opened:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("OpenSink waited for the sweep of stale temp files")
	}
	<-started
	select {
	case <-stopped:
		t.Fatal("the sweep ended before the sink closed")
	default:
	}
	require.NoError(t, s.Close(context.Background()))
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned while the sweep still ran")
	}
}

// TestArchiveSinkWarnsWhenItsSweepStopsAtItsCap: when the opening sweep
// of stale temp files stops at its cap (parquet.TempSweepBudget, on a
// tree too large to walk in it; LocalArchive.SweepTemps' own test covers
// that stop), the sink logs one warning naming the archive, how many it
// deleted until then and the sweep's error, which says it stopped and
// after how long; not the line of a finished sweep, nor the one of a
// sweep the sink's Close stopped. No test covered that warning.
func TestArchiveSinkWarnsWhenItsSweepStopsAtItsCap(t *testing.T) {
	dir := t.TempDir()
	old := sweepArchiveTemps
	t.Cleanup(func() { sweepArchiveTemps = old })
	var swept atomic.Pointer[parquet.LocalArchive]
	sweepArchiveTemps = func(a *parquet.LocalArchive, _ context.Context) (int, error) {
		swept.Store(a)
		// What SweepTemps returns when its budget runs out after 3 deletions.
		return 3, fmt.Errorf("local archive %s: sweep of stale temp files: stopped after %s, the rest left for the next sweep", a.Root(), parquet.TempSweepBudget)
	}
	var logged logtest.Buffer
	env := SinkEnv{Pipeline: "plant", Source: &KafkaSource{}, Log: slog.New(slog.NewTextHandler(&logged, nil))}
	s, err := ArchiveSink{Dir: dir}.OpenSink(context.Background(), env)
	require.NoError(t, err)
	// Closed once the sweep logged: a sweep the sink's Close stopped says so instead.
	require.Eventually(t, func() bool { return strings.Contains(logged.String(), "archive sink: ") },
		30*time.Second, 5*time.Millisecond, "the sweep's log line")
	require.NoError(t, s.Close(context.Background()))
	require.NotNil(t, swept.Load(), "the sink ran no sweep")
	require.Equal(t, dir, swept.Load().Root(), "the sink swept another archive")

	out := logged.String()
	require.Equal(t, 1, strings.Count(out, "\n"), "one line: %s", out)
	require.Contains(t, out, `level=WARN msg="archive sink: stale temp files swept in part" archive=file://`+dir+" deleted=3 ")
	require.Contains(t, out, ` err="local archive `+dir+`: sweep of stale temp files: stopped after 10s, the rest left for the next sweep"`)
	require.NotContains(t, out, "stale temp files deleted")
	require.NotContains(t, out, "stopped as the sink closed")
}
