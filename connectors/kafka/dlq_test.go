package kafka

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tflo-io/tflo/streaming"
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

// TestDeadLetterSink: a pipeline's dead letters (Outputs carrying a
// streaming.DeadLetter) reach the sink's topic as the records that came,
// with their own headers (forged tflo-dlq-* ones dropped) and headers
// naming the source and the reason; one too large for the client's batch
// limit goes truncated; Flush waits for them; an Output that is not a
// dead letter is refused.
func TestDeadLetterSink(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := NewPublisher(ctx, PublishTo("readings.dlq", addrs...), PublisherClientOptions(kgo.ProducerBatchMaxBytes(64<<10)))
	require.NoError(t, err)
	s := NewDeadLetterSink(pub)
	defer s.Close(ctx)

	big := bytes.Repeat([]byte("x"), 100<<10)
	ts := time.UnixMilli(1_700_000_000_000)
	outs := []streaming.Output{
		{Shard: streaming.KafkaShard("readings", 3), Offset: 41, Topic: "readings", Key: "s-1", TS: ts.UnixNano(),
			Dead: &streaming.DeadLetter{Key: []byte("s-1"), Value: []byte("not json"), Partition: 3, Group: "central",
				Headers: []streaming.Header{{Key: "origin", Value: []byte("edge-7")}, {Key: HeaderDLQError, Value: []byte("forged")}},
				Err:     errors.New("invalid character 'o'")}},
		{Shard: streaming.KafkaShard("readings", 3), Offset: 42, Topic: "readings", Key: "s-2", TS: ts.UnixNano(),
			Dead: &streaming.DeadLetter{Key: []byte("s-2"), Value: big, Partition: 3, Group: "central", Err: errors.New("too long")}},
		// An MQTT source's: no key, partition or offset; its packet id.
		{Shard: "edge-gw-1", Offset: -1, Topic: "sensors/x", TS: ts.UnixNano(),
			Dead: &streaming.DeadLetter{Value: []byte("{"), Partition: -1, Group: "edge-gw-1", PacketID: 7, Err: errors.New("unexpected end")}},
	}
	require.NoError(t, s.Write(ctx, outs))
	require.NoError(t, s.Flush(ctx, "", 0))
	require.Equal(t, uint64(3), s.Produced())
	require.ErrorContains(t, s.Write(ctx, []streaming.Output{{Key: "s-3", Name: "sma", Value: 1}}), `output "sma" of key "s-3" (shard , offset 0) is not a dead letter`)

	got := dlqRecords(t, addrs, 3)
	byKey := map[string]*kgo.Record{}
	for _, r := range got {
		byKey[string(r.Key)] = r
	}
	r := byKey["s-1"]
	require.NotNil(t, r)
	require.Equal(t, "not json", string(r.Value))
	require.True(t, r.Timestamp.Equal(ts), "the record's timestamp: %v", r.Timestamp)
	require.Equal(t, []string{"edge-7"}, headerValues(r, "origin"))
	require.Equal(t, []string{"readings"}, headerValues(r, HeaderDLQTopic))
	require.Equal(t, []string{"3"}, headerValues(r, HeaderDLQPartition))
	require.Equal(t, []string{"41"}, headerValues(r, HeaderDLQOffset))
	require.Equal(t, []string{"central"}, headerValues(r, HeaderDLQGroup))
	require.Equal(t, []string{"invalid character 'o'"}, headerValues(r, HeaderDLQError), "the forged header is dropped")
	r = byKey["s-2"]
	require.NotNil(t, r)
	require.Equal(t, []string{"value"}, headerValues(r, HeaderDLQTruncated))
	require.Equal(t, []string{strconv.Itoa(len(big))}, headerValues(r, HeaderDLQValueBytes))
	require.Less(t, len(r.Value), len(big))
	require.Empty(t, headerValues(r, HeaderDLQPacketID), "a Kafka record has no packet id")
	r = byKey[""]
	require.NotNil(t, r)
	require.Equal(t, "{", string(r.Value))
	require.Equal(t, []string{"sensors/x"}, headerValues(r, HeaderDLQTopic))
	require.Equal(t, []string{"-1"}, headerValues(r, HeaderDLQPartition))
	require.Equal(t, []string{"edge-gw-1"}, headerValues(r, HeaderDLQGroup))
	require.Equal(t, []string{"7"}, headerValues(r, HeaderDLQPacketID))
}

// TestDeadLetterDroppedForItsSizeIsNotCountedDelivered: a dead letter
// that even truncated is too large for the dead-letter topic is dropped
// (logged; its size never fails a checkpoint). The sink counted it in
// Produced, as delivered, and not in Failed, so the loss showed in no
// counter; it is counted lost now, and Flush still succeeds.
func TestDeadLetterDroppedForItsSizeIsNotCountedDelivered(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	setMaxMessageBytes(t, ctx, addrs, "readings.dlq", 4<<10) // below a truncated dead letter's 16 KiB of value
	pub, err := NewPublisher(ctx, PublishTo("readings.dlq", addrs...))
	require.NoError(t, err)
	s := NewDeadLetterSink(pub)
	defer s.Close(ctx)

	value := randomBytes(rand.New(rand.NewPCG(5, 6)), 32<<10) // incompressible: the copy stays over the limit
	require.NoError(t, s.Write(ctx, []streaming.Output{{Shard: streaming.KafkaShard("readings", 0), Offset: 7, Topic: "readings", Key: "s-1",
		Dead: &streaming.DeadLetter{Key: []byte("s-1"), Value: value, Group: "central", Err: errors.New("bad")}}}))
	require.NoError(t, s.Flush(ctx, "", 0), "a dead letter's size never fails a checkpoint")
	require.Zero(t, s.Produced(), "the dropped dead letter was not delivered")
	require.Equal(t, uint64(1), s.Failed(), "the dropped dead letter is lost")
}

// TestLazyDeadLettersKeepBatchesUnderTheTopicLimit: a lazy publisher (a
// Kafka source's default dead-letter sink) connects nothing up front, so
// it did not learn the dead-letter topic's max.message.bytes and batched
// up to kgo's default 1,000,012 bytes. A topic with a lower limit refused
// whole batches (MESSAGE_TOO_LARGE); each dead letter in them was taken
// as too large, truncated, batched again, refused again and dropped: of
// 40 dead letters of 4 KiB under a 64 KiB limit, 7 reached the topic. The
// lazy publisher learns the limit when it first produces to the topic, so
// each one reaches it whole, and only one too large on its own goes
// truncated.
func TestLazyDeadLettersKeepBatchesUnderTheTopicLimit(t *testing.T) {
	const n = 40
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setMaxMessageBytes(t, ctx, addrs, "readings.dlq", 64<<10)
	pub, err := NewPublisher(ctx, PublishTo("readings.dlq", addrs...), PublisherLazy())
	require.NoError(t, err)
	s := NewDeadLetterSink(pub)
	defer s.Close(ctx)

	rng := rand.New(rand.NewPCG(7, 8)) // incompressible: batches stay as large as their records
	outs := deadLetterOutputs(rng, n)
	// One too large on its own: only it is truncated.
	big := randomBytes(rng, 100<<10)
	outs = append(outs, streaming.Output{Shard: streaming.KafkaShard("readings", 0), Offset: n, Topic: "readings", Key: "big",
		Dead: &streaming.DeadLetter{Key: []byte("big"), Value: big, Group: "central", Err: errors.New("bad")}})
	require.NoError(t, s.Write(ctx, outs))
	require.NoError(t, s.Flush(ctx, "", 0))
	require.Zero(t, s.Failed(), "dead letters lost")
	require.Equal(t, uint64(n+1), s.Produced())
	got := dlqRecords(t, addrs, n+1)
	require.Len(t, got, n+1)
	for _, r := range got {
		if string(r.Key) == "big" {
			require.Equal(t, []string{"value"}, headerValues(r, HeaderDLQTruncated))
			require.True(t, bytes.HasPrefix(big, r.Value))
			continue
		}
		require.Empty(t, headerValues(r, HeaderDLQTruncated), "dead letter of %s truncated", r.Key)
		require.Len(t, r.Value, 4<<10)
	}
}

// setMaxMessageBytes sets topic's max.message.bytes to limit on the
// cluster at addrs.
func setMaxMessageBytes(t *testing.T, ctx context.Context, addrs []string, topic string, limit int, opts ...kgo.Opt) {
	t.Helper()
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	require.NoError(t, err)
	defer admin.Close()
	v := strconv.Itoa(limit)
	_, err = kadm.NewClient(admin).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, topic)
	require.NoError(t, err)
}

// TestDeadLetterTopicLimitReadWithTheClientOptions: the dead-letter
// topic's max.message.bytes was read with a client of the seed brokers and
// PublisherSecurity only, not the PublisherClientOptions: credentials
// given as a raw kgo.SASL option were refused there, the limit stayed
// kgo's default 1,000,012 bytes, and batches of dead letters over the
// topic's 64 KiB were refused whole, each dead letter in them sent
// truncated or dropped. The limit is read with the same options as the
// publisher's client.
func TestDeadLetterTopicLimitReadWithTheClientOptions(t *testing.T) {
	const n = 40
	sasl := kgo.SASL(plain.Auth{User: "svc", Pass: "s3cret-pw"}.AsMechanism())
	c := newCluster(t, 1, kfake.EnableSASL(), kfake.Superuser(MechanismPlain, "svc", "s3cret-pw"))
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setMaxMessageBytes(t, ctx, addrs, "readings.dlq", 64<<10, sasl)
	for _, lazy := range []bool{false, true} {
		opts := []PublisherOption{PublishTo("readings.dlq", addrs...), PublisherClientOptions(sasl)}
		if lazy {
			opts = append(opts, PublisherLazy())
		}
		pub, err := NewPublisher(ctx, opts...)
		require.NoError(t, err)
		s := NewDeadLetterSink(pub)
		outs := deadLetterOutputs(rand.New(rand.NewPCG(9, 10)), n) // incompressible: batches stay as large as their records
		require.NoError(t, s.Write(ctx, outs))
		require.NoError(t, s.Flush(ctx, "", 0))
		require.NoError(t, s.Close(ctx))
		require.Zero(t, s.Failed(), "dead letters lost (lazy %v)", lazy)
		require.Equal(t, uint64(n), s.Produced())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), sasl, kgo.ConsumeTopics("readings.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 2*n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	require.Len(t, got, 2*n)
	for _, r := range got {
		require.Empty(t, headerValues(r, HeaderDLQTruncated), "dead letter of %s truncated", r.Key)
	}
}

// TestSlowTopicConfigsHoldNoProduce: a publisher read the dead-letter
// topic's max.message.bytes when kgo first discovered the topic, inside
// kgo's metadata loop: with DescribeConfigs unanswered, the loop (every
// produce waiting for metadata) stood still for up to 10 s, and the
// first dead letter's Flush with it. The callback kgo calls reads no
// more: the limits are read before producing (up front, or for a lazy
// publisher on its first publish), so a later slow DescribeConfigs holds
// nothing.
func TestSlowTopicConfigsHoldNoProduce(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hang atomic.Bool
	release := make(chan struct{})
	defer close(release)
	c.ControlKey(kmsg.DescribeConfigs.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if hang.Load() {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	for _, lazy := range []bool{false, true} {
		opts := []PublisherOption{PublishTo("readings", addrs...)}
		if lazy {
			opts = append(opts, PublisherLazy())
		}
		pub, err := NewPublisher(ctx, opts...)
		require.NoError(t, err)
		require.NoError(t, pub.Publish(ctx, "s-1", []byte("first")))
		require.NoError(t, pub.Flush(ctx))
		hang.Store(true)
		// Too large for the batch limit: dead-lettered to readings.dlq.
		require.NoError(t, pub.Publish(ctx, "s-2", bytes.Repeat([]byte("x"), 1100<<10)))
		require.NoError(t, pub.Publish(ctx, "s-3", []byte("next")))
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		require.NoError(t, pub.Flush(fctx), "lazy %v", lazy)
		fcancel()
		require.Equal(t, uint64(1), pub.DeadLettered())
		pub.Close()
		hang.Store(false)
	}
}

// TestDeadLetterErrorHeaderIsCutAtARune: the error header is bounded to
// 1 KiB; the cut fell inside a multi-byte rune of an error quoting a
// non-ASCII key (invalid UTF-8 for readers taking the header as text).
func TestDeadLetterErrorHeaderIsCutAtARune(t *testing.T) {
	rec := &kgo.Record{Topic: "readings", Partition: 2, Offset: 9, Key: []byte("k"), Value: []byte("{")}
	for pad := maxErrorHeader - 4; pad < maxErrorHeader; pad++ {
		cause := errors.New(strings.Repeat("x", pad) + "ключ-€-😀")
		got := headerValues(DeadLetter("readings.dlq", "central", rec, cause), HeaderDLQError)
		require.Len(t, got, 1)
		require.True(t, utf8.ValidString(got[0]), "pad %d: %q", pad, got[0][pad-2:])
		require.LessOrEqual(t, len(got[0]), maxErrorHeader)
		require.Greater(t, len(got[0]), maxErrorHeader-utf8.UTFMax)
		require.True(t, strings.HasPrefix(cause.Error(), got[0]))
	}
}
