package kafka

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/internal/lograte"
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

// deadLettering is a Partitions runtime whose handlers dead-letter every
// record and then wait for the dead letters, as a checkpoint does; each
// wait's result goes to flushed.
type deadLettering struct{ flushed chan error }

func (d *deadLettering) Open(_ context.Context, a Assignment) (PartitionHandler, int64, error) {
	return &deadLetterHandler{a: a, flushed: d.flushed}, -1, nil
}

type deadLetterHandler struct {
	a       Assignment
	flushed chan error
}

func (h *deadLetterHandler) Handle(ctx context.Context, recs []*kgo.Record) error {
	for _, r := range recs {
		h.a.DeadLetter(r, errors.New("bad reading"))
	}
	h.flushed <- h.a.FlushDeadLetters(ctx)
	return nil
}

func (h *deadLetterHandler) Release(context.Context, bool) error { return nil }

// TestSourceTruncatesDeadLettersOverTheClientLimit: a dead letter larger
// than the source client's ProducerBatchMaxBytes goes out truncated, and
// the wait a checkpoint makes on it succeeds. The source cuts it up front
// (with the limit it read once per client); were that check gone, kgo's
// refusal (MESSAGE_TOO_LARGE) would still send the truncated copy, so this
// test holds the behaviour, not the shortcut.
func TestSourceTruncatesDeadLettersOverTheClientLimit(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	d := &deadLettering{flushed: make(chan error, 16)}
	m := startMember(t, "a", WithBrokers(addrs...), WithGroup("dlq-limit"), WithTopics("readings"), WithPartitions(d),
		WithClientOptions(kgo.ProducerBatchMaxBytes(32<<10), kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)))

	value := bytes.Repeat([]byte("v"), 64<<10) // over the source's limit, under the producer's
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte("s-1"), Value: value}).FirstErr())

	select {
	case err := <-d.flushed:
		require.NoError(t, err, "a dead letter over the client's limit must not fail the checkpoint")
	case <-ctx.Done():
		t.Fatal("the record was never handled")
	}
	r := dlqRecords(t, addrs, 1)[0]
	require.Equal(t, []string{"value"}, headerValues(r, HeaderDLQTruncated))
	require.Equal(t, []string{"65536"}, headerValues(r, HeaderDLQValueBytes))
	require.True(t, bytes.HasPrefix(value, r.Value), "the truncated value is a prefix of the original")
	require.Less(t, len(r.Value), len(value))
	require.Zero(t, m.src.Stats().DeadLetterErrors)
	m.stop(t)
}

// msgCounter is a slog handler that counts the lines with one message and
// the "suppressed" counts they carry.
type msgCounter struct {
	msg               string
	lines, suppressed atomic.Int64
}

func (c *msgCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *msgCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *msgCounter) WithGroup(string) slog.Handler            { return c }

func (c *msgCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.lines.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "suppressed" {
				c.suppressed.Add(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

// TestDeadLetterLogIsSampled: a stream of bad records writes a sample of
// dead-letter lines, not one per record (the log flooded and the hot path
// waited on stderr), while every record is dead-lettered and counted.
func TestDeadLetterLogIsSampled(t *testing.T) {
	const n = 300
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	logged := &msgCounter{msg: "record dead-lettered"}
	d := &deadLettering{flushed: make(chan error, n)}
	start := time.Now()
	m := startMember(t, "a", WithBrokers(addrs...), WithGroup("dlq-sampled"), WithTopics("readings"), WithPartitions(d),
		WithLogger(slog.New(logged)),
		WithClientOptions(kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)))

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte("s-1"), Value: []byte("not a reading " + strconv.Itoa(i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	require.Eventually(t, func() bool { return m.src.Stats().DeadLettered == n }, 20*time.Second, 5*time.Millisecond)
	elapsed := time.Since(start)
	dlqRecords(t, addrs, n)
	require.Zero(t, m.src.Stats().DeadLetterErrors)

	lines := logged.lines.Load()
	intervals := int64(elapsed/lograte.DefaultInterval) + 1
	require.Positive(t, lines, "the first dead letters are logged")
	require.LessOrEqual(t, lines, lograte.DefaultBurst*intervals,
		"%d records over %v: at most %d lines per %v", n, elapsed, lograte.DefaultBurst, lograte.DefaultInterval)
	require.LessOrEqual(t, lines+logged.suppressed.Load(), int64(n), "a line left out is reported once")
	m.stop(t)
}
