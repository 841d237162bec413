package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// TestShardsShareTheWholeBudget: a worker splits State.Memory among the
// shards it holds, not among the topic's partitions. Alone on 4
// partitions each shard has a quarter; once a second worker took half of
// them, each of the first worker's two has a half, so the worker still
// uses its whole budget (it used to keep a quarter each and leave half
// its memory unused); when the second worker leaves, the first is back
// to quarters, and its shards' budgets never add up to more than the
// whole.
func TestShardsShareTheWholeBudget(t *testing.T) {
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	p := alarmPipeline(addrs, "")
	p.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 3 * time.Second, RevokeTimeout: 5 * time.Second}
	p.State.Durable = pipeline.Durable{Store: memory.New()}
	p.Checkpoint = pipeline.Checkpoint{Interval: time.Second}
	total := int64(p.State.Memory)

	// budgets returns the budgets of w's shards, once they are n.
	budgets := func(w *pipeline.Worker, n int) []int64 {
		t.Helper()
		var out []int64
		require.Eventually(t, func() bool {
			ss := w.Shards()
			out = out[:0]
			for _, s := range ss {
				out = append(out, s.State.BudgetBytes)
			}
			return len(ss) == n
		}, 30*time.Second, 10*time.Millisecond, "the worker never held %d shards", n)
		return out
	}
	each := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = total / int64(n)
		}
		return out
	}

	a := start(t, p, pipeline.WithWorkerID("a"))
	require.Equal(t, each(4), budgets(a.w, 4))

	b := start(t, p, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return len(a.w.Shards()) == 2 && len(b.w.Shards()) == 2 }, 30*time.Second, 10*time.Millisecond,
		"the two workers never shared the partitions")
	require.Equal(t, each(2), budgets(a.w, 2))
	require.Equal(t, each(2), budgets(b.w, 2))

	b.stop(t)
	require.Equal(t, each(4), budgets(a.w, 4))
}
