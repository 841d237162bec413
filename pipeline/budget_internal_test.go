package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// TestUnknownPartitionCountKeepsTheBudget: a Kafka assignment whose
// topic's partition count is unknown (kafka.Assignment.TopicPartitions 0:
// the metadata request failed) splits State.Memory among the shards held.
// Bug: 0 was taken as a topic of one partition, so the shard opened then
// got the whole budget and every open shard was resized to it too: three
// shards held three times State.Memory.
func TestUnknownPartitionCountKeepsTheBudget(t *testing.T) {
	p := Pipeline{
		Name:   "plant",
		Source: KafkaSource{Brokers: []string{"127.0.0.1:1"}, Topic: "readings"},
		Graph: Graph{Inputs: []Input{{Name: "value"}},
			Nodes: []Node{{Name: "mean", Type: "sma", Params: map[string]any{"window": 3}, Inputs: []string{"value"}}}},
		State:      State{Memory: 128 << 20},
		Checkpoint: Checkpoint{Interval: time.Hour},
	}
	w, err := NewWorker(context.Background(), p, WithWorkerID("w1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	total := int64(p.State.Memory)
	budgets := func() (sum int64, each []int64) {
		w.budgetMu.Lock()
		defer w.budgetMu.Unlock()
		for rt := range w.runtimes {
			b := rt.Stats().Budget
			sum += b
			each = append(each, b)
		}
		return sum, each
	}
	for i, maxShards := range []int{4, 4, 0, 0} {
		rt, err := w.newRuntime(streaming.KafkaShard("readings", int32(i)), maxShards)
		require.NoError(t, err)
		t.Cleanup(func() { w.releaseRuntime(rt); _ = rt.Close() })
		sum, each := budgets()
		require.LessOrEqual(t, sum, total, "%d shards open (the last of an unknown partition count: %v): budgets %v add up to more than state.memory %d",
			i+1, maxShards == 0, each, total)
		for _, b := range each {
			require.Equal(t, total/int64(i+1), b, "shard budgets after %d opened: %v", i+1, each)
		}
	}
}
