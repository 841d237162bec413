package kafka

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// dlqRecords reads n records of the DLQ topic.
func dlqRecords(t *testing.T, addrs []string, n int) []*kgo.Record {
	t.Helper()
	dl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("readings.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer dl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n && ctx.Err() == nil {
		dl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	require.GreaterOrEqual(t, len(got), n, "dead letters")
	return got
}

func headerValues(r *kgo.Record, key string) []string {
	var vs []string
	for _, h := range r.Headers {
		if strings.EqualFold(h.Key, key) {
			vs = append(vs, string(h.Value))
		}
	}
	return vs
}

// A dead letter over the client's own batch limit is truncated before it
// is sent (kgo would fail it before buffering, outside any Flush).
func TestTruncateDeadLetter(t *testing.T) {
	rec := &kgo.Record{Topic: "readings", Partition: 2, Offset: 9, Key: bytes.Repeat([]byte("k"), 5000), Value: bytes.Repeat([]byte("v"), 100_000),
		Headers: []kgo.RecordHeader{{Key: "big", Value: bytes.Repeat([]byte("h"), 4096)}}}
	dl := DeadLetter("readings.dlq", "central", rec, errors.New("bad"))
	small := TruncateDeadLetter(dl)
	require.Equal(t, "readings.dlq", small.Topic)
	require.Len(t, small.Key, truncatedKeyBytes)
	require.Len(t, small.Value, truncatedValueBytes)
	require.Equal(t, []string{"key,value,headers"}, headerValues(small, HeaderDLQTruncated))
	require.Equal(t, []string{"5000"}, headerValues(small, HeaderDLQKeyBytes))
	require.Equal(t, []string{"100000"}, headerValues(small, HeaderDLQValueBytes))
	require.Empty(t, headerValues(small, "big"))
	require.Equal(t, []string{"2"}, headerValues(small, HeaderDLQPartition))
	require.Less(t, recordBytes(small), 20<<10)
}
