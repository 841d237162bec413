package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
)

// TestKafkaPipelineRestartsFromItsCheckpoint: a pipeline over a Kafka
// topic computes what Evaluate computes over the same records; stopped
// (final checkpoints on revoke) and started again on another worker with
// the same durable store, it resumes after the checkpoints' offsets with
// the restored state: the outputs equal one uninterrupted run's, and no
// record is applied twice.
func TestKafkaPipelineRestartsFromItsCheckpoint(t *testing.T) {
	c := newCluster(t, 4)
	addrs := c.ListenAddrs()
	rec := newRecorder()
	dir := t.TempDir()
	p := alarmPipeline(addrs, dir, rec.shared())

	first := makeReadings(16, 1, 40)
	produce(t, addrs, first)
	a := start(t, p, pipeline.WithWorkerID("a"))
	require.Eventually(t, func() bool { return a.w.Stats().RecordsIn == uint64(len(first)) }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 4, a.w.Stats().Owned)
	a.stop(t)
	rec.requireExact(t, reference(t, p, first))

	second := makeReadings(16, 41, 80)
	produce(t, addrs, second)
	b := start(t, p, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return b.w.Stats().RecordsIn == uint64(len(second)) }, 30*time.Second, 10*time.Millisecond)
	for _, s := range b.w.Shards() {
		require.Positive(t, s.Checkpoint.LastID, "shard %s restored a checkpoint", s.Shard)
	}
	b.stop(t)
	rec.requireExact(t, reference(t, p, append(first, second...)))
}
