package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/streaming"
)

// TestGroupCursorStore: the store a Kafka partition's checkpoints save
// their cursor through, against kfake's group coordinator. A save commits
// the offset after the cursor's record, and a load reads it back from the
// partition named at the end of its key (whatever the key's prefix); a
// partition never committed is not found; a record without a cursor
// commits nothing; a cursor of another type is refused naming the key;
// a commit the broker answers as from an old generation is fenced.
func TestGroupCursorStore(t *testing.T) {
	c := newCluster(t, 2)
	assigned := make(chan struct{}, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("central"), kgo.ConsumeTopics("readings"),
		kgo.DisableAutoCommit(), kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	select {
	case <-assigned:
	case <-ctx.Done():
		t.Fatal("the member was never assigned its partitions")
	}
	g := NewGroupCursorStore(cl, "central")
	key := []byte("pipelines/sma/" + string(streaming.KafkaShard("readings", 1)))

	_, err = g.LoadCursor(ctx, key)
	require.ErrorIs(t, err, streaming.ErrNotFound)

	at := streaming.KafkaOffset{Topic: "readings", Partition: 1, Offset: 41}
	require.NoError(t, g.SaveCursor(ctx, key, streaming.CursorRecord{Type: streaming.CursorTypeKafka, Cursor: at.Bytes(), Epoch: 3, CheckpointID: 7}))
	got, err := g.LoadCursor(ctx, key)
	require.NoError(t, err)
	require.Equal(t, streaming.CursorTypeKafka, got.Type)
	require.Equal(t, at.Bytes(), got.Cursor, "the committed offset is the next record's: loaded back as the last one's")

	// Nothing to commit; a foreign cursor is refused, naming the key.
	require.NoError(t, g.SaveCursor(ctx, key, streaming.CursorRecord{Type: streaming.CursorTypeKafka}))
	err = g.SaveCursor(ctx, key, streaming.CursorRecord{Type: streaming.CursorTypeMQTT, Cursor: []byte("x")})
	require.ErrorContains(t, err, string(key))
	got, err = g.LoadCursor(ctx, key)
	require.NoError(t, err)
	require.Equal(t, at.Bytes(), got.Cursor, "a refused save commits nothing")

	// The broker says the member's generation is over: fenced.
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.IllegalGeneration.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	next := streaming.KafkaOffset{Topic: "readings", Partition: 1, Offset: 99}
	err = g.SaveCursor(ctx, key, streaming.CursorRecord{Type: streaming.CursorTypeKafka, Cursor: next.Bytes(), Epoch: 3})
	require.ErrorIs(t, err, streaming.ErrFenced)
	require.ErrorContains(t, err, `group "central"`)

	// A key that names no partition.
	_, err = g.LoadCursor(ctx, []byte("no-partition"))
	require.ErrorContains(t, err, `cursor key "no-partition"`)
}
