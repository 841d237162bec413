package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// smaPipeline is pipeline "plant": readings' value through an SMA of
// window, state in memory-backed durable store, no timed checkpoints.
// Its broker is never dialled: tests drive its shards directly.
func smaPipeline(t *testing.T, window int) Pipeline {
	return Pipeline{
		Name:   "plant",
		Source: KafkaSource{Brokers: []string{"127.0.0.1:1"}, Topic: "readings"},
		Graph: Graph{Inputs: []Input{{Name: "value"}},
			Nodes: []Node{{Name: "mean", Type: "sma", Params: map[string]any{"window": window}, Inputs: []string{"value"}}}},
		State:      State{Memory: 128 << 20, Dir: t.TempDir(), Durable: Durable{Store: memory.New()}},
		Checkpoint: Checkpoint{Interval: time.Hour},
	}
}

// openPartitionZero starts a worker of p and opens partition readings/0
// at epoch 1, as the Kafka source would on its assignment.
func openPartitionZero(ctx context.Context, t *testing.T, p Pipeline) (*Worker, *kafkaShard) {
	t.Helper()
	w, err := NewWorker(ctx, p, WithWorkerID("w1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	id := streaming.KafkaShard("readings", 0)
	s, err := w.openShard(ctx, id, 1, 1, nil, nil, streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 1, true }))
	require.NoError(t, err)
	return w, &kafkaShard{shard: s, a: kafka.Assignment{Partition: kafka.Partition{Topic: "readings", Partition: 0}, Epoch: 1}, last: -1}
}

// gainPartition opens partition readings/p of w at epoch 1 and has w
// hold it, as the Kafka source does on its assignment: its series are
// among w's metrics.
func gainPartition(ctx context.Context, t *testing.T, w *Worker, p int32) *kafkaShard {
	t.Helper()
	id := streaming.KafkaShard("readings", p)
	s, err := w.openShard(ctx, id, 1, 1, nil, nil, streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 1, true }))
	require.NoError(t, err)
	k := &kafkaShard{shard: s, a: kafka.Assignment{Partition: kafka.Partition{Topic: "readings", Partition: p}, Epoch: 1}, last: -1}
	w.host.gained(k.shard)
	return k
}
