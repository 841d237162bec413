package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/streaming"
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
	p := smaPipeline(t, 1)
	p.DeadLetter = Use(dead)
	_, k := openPartitionZero(ctx, t, p)
	require.NoError(t, k.apply(ctx, []*kgo.Record{
		{Topic: "readings", Offset: 0, Value: fmt.Appendf(nil, `{"sensor":"a","ts":1,"value":1}`)},
		{Topic: "readings", Offset: 1, Value: []byte("not json")},
	}))
	require.Len(t, dead.Outputs(), 1)
	_, err := k.cp.Checkpoint(ctx)
	require.NoError(t, err)
	dead.mu.Lock()
	defer dead.mu.Unlock()
	require.Equal(t, []int64{1}, dead.marks)
}
