package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
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
