package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// cutMarkingSink is a streaming.SinkCutMarker that records its marks.
type cutMarkingSink struct {
	*streaming.MemorySink
	mu    sync.Mutex
	marks []int64
}

func (c *cutMarkingSink) MarkCut(_ streaming.ShardID, offset int64) {
	c.mu.Lock()
	c.marks = append(c.marks, offset)
	c.mu.Unlock()
}

// TestDeadLetterSinkIsToldTheCut: the dead-letter sink is a sink like
// the others: one that marks cuts (its pre-commit holds exactly the dead
// letters of the records a checkpoint contains) is told where each cut
// falls. Bug: only the output sinks were, so such a dead-letter sink
// pre-committed dead letters of records after the cut, which the next
// owner dead-letters again.
func TestDeadLetterSinkIsToldTheCut(t *testing.T) {
	ctx := context.Background()
	dead := &cutMarkingSink{MemorySink: streaming.NewMemorySink()}
	p := Pipeline{
		Name:   "plant",
		Source: KafkaSource{Brokers: []string{"127.0.0.1:1"}, Topic: "readings"},
		Graph: Graph{Inputs: []Input{{Name: "value"}},
			Nodes: []Node{{Name: "mean", Type: "sma", Params: map[string]any{"window": 1}, Inputs: []string{"value"}}}},
		DeadLetter: Use(dead),
		State:      State{Memory: 128 << 20, Dir: t.TempDir(), Durable: Durable{Store: memory.New()}},
		Checkpoint: Checkpoint{Interval: time.Hour},
	}
	w, err := NewWorker(ctx, p, WithWorkerID("w1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	id := streaming.KafkaShard("readings", 0)
	s, err := w.openShard(ctx, id, 1, 1, nil, nil, streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 1, true }))
	require.NoError(t, err)
	k := &kafkaShard{shard: s, a: kafka.Assignment{Partition: kafka.Partition{Topic: "readings", Partition: 0}, Epoch: 1}, last: -1}
	require.NoError(t, k.apply(ctx, []*kgo.Record{
		{Topic: "readings", Offset: 0, Value: fmt.Appendf(nil, `{"sensor":"a","ts":1,"value":1}`)},
		{Topic: "readings", Offset: 1, Value: []byte("not json")},
	}))
	require.Len(t, dead.Outputs(), 1)
	_, err = k.cp.Checkpoint(ctx)
	require.NoError(t, err)
	dead.mu.Lock()
	defer dead.mu.Unlock()
	require.Equal(t, []int64{1}, dead.marks)
}
