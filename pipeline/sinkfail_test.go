package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// breakingSink takes outputs until broken is set, then refuses every
// Write (as a sink whose publisher failed, or whose server refused its
// credentials, does).
type breakingSink struct {
	broken  atomic.Bool
	written atomic.Int64
}

var errBroken = errors.New("the sink's server refused the write")

func (s *breakingSink) Write(_ context.Context, outs []streaming.Output) error {
	if s.broken.Load() {
		return errBroken
	}
	s.written.Add(int64(len(outs)))
	return nil
}

func (*breakingSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	return nil
}
func (*breakingSink) Close(context.Context) error { return nil }

// TestFailedSinkWriteStopsTheWorker: a sink Write that fails leaves a
// hole in that sink's outputs, so no later checkpoint of the worker can
// commit. The worker ran on, failing every checkpoint ("an earlier sink
// write failed") and never checkpointing again; it now stops, Run's error
// naming the sink as the spec does (sinks[1]), so that a restart replays
// from the last checkpoint. What was checkpointed before stays.
func TestFailedSinkWriteStopsTheWorker(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	keys := sensorKeys(4)
	produceSeq(t, addrs, keys, 1, 20)
	j := newJournal()
	bad := &breakingSink{}
	durable := memory.New()
	p := seqPipeline(addrs, durable, j.as("a"), pipeline.Use(bad))
	r := start(t, p, pipeline.WithOperators(seqRegistry(t)))
	r.waitFor(t, func() bool { return j.allReached(keys, 20) }, 20*time.Second, "the first records never came through")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, r.w.Checkpoint(ctx))

	bad.broken.Store(true)
	produceSeq(t, addrs, keys, 21, 30)
	select {
	case err := <-r.done:
		close(r.done) // the cleanup's stop must not wait for it again
		require.Error(t, err)
		require.ErrorContains(t, err, "sinks[1]: write: ")
		require.ErrorIs(t, err, errBroken)
		require.ErrorContains(t, r.w.Err(), "sinks[1]")
	case <-time.After(30 * time.Second):
		t.Fatal("the worker ran on after a sink write failed")
	}

	// A new worker (the restart) resumes from the checkpoint before the
	// failure: every record after it is applied again, each once.
	bad.broken.Store(false)
	j2 := newJournal()
	r2 := start(t, seqPipeline(addrs, durable, j2.as("b"), pipeline.Use(bad)), pipeline.WithOperators(seqRegistry(t)))
	r2.waitFor(t, func() bool { return j2.allReached(keys, 30) }, 20*time.Second, "the restarted worker did not replay")
	for _, e := range j2.events {
		require.Greater(t, e.seq, int64(20), "record %d of %s was before the checkpoint", e.seq, e.key)
	}
	r2.stop(t)
}
