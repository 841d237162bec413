package kafka

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDeadLetters: malformed records among good ones go to the DLQ topic
// with headers naming their source and the error; the good ones are
// applied, the counter rises, and the checkpoint commits past the bad
// ones.
func TestDeadLetters(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	g := seqGraph(t)
	store := memory.New()
	j := &journal{}

	bad := map[string]string{ // value -> expected error fragment
		`{"sensor":"s-1","ts":1,"value":"hot"}`: "cannot unmarshal",
		`not json at all`:                       "invalid character",
		`{"ts":2,"value":3}`:                    `missing "sensor"`,
		`{"sensor":"s-1","ts":3}`:               `missing "value"`,
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	seq := 0
	for v := range bad {
		seq++
		recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", seq)}, &kgo.Record{Key: []byte("s-1"), Value: []byte(v)})
	}
	seq++
	recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", seq)})
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	m := startMember(t, "m", memberOpts(addrs, g, store, j, "m")...)
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, seq) }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(len(bad)), m.src.Stats().DeadLettered)
	require.Equal(t, uint64(seq), m.src.Stats().Applied)
	require.NoError(t, m.src.Checkpoint(ctx))

	// Read the DLQ.
	dl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("readings.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer dl.Close()
	var got []*kgo.Record
	for len(got) < len(bad) && ctx.Err() == nil {
		dl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	// Dead letters are at least once (a replay after a crash sends them
	// again); each carries its source position, so count distinct sources.
	sources := map[string]int{}
	for _, r := range got {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		frag, ok := bad[string(r.Value)]
		require.True(t, ok, "unexpected DLQ value %q", r.Value)
		require.Equal(t, "readings", h[HeaderDLQTopic])
		require.Equal(t, "central", h[HeaderDLQGroup])
		require.Contains(t, h[HeaderDLQError], frag)
		p, err := strconv.Atoi(h[HeaderDLQPartition])
		require.NoError(t, err)
		off, err := strconv.ParseInt(h[HeaderDLQOffset], 10, 64)
		require.NoError(t, err)
		// The headers point at the original record.
		orig := fetchAt(t, addrs, "readings", int32(p), off)
		require.Equal(t, string(r.Value), string(orig.Value))
		require.True(t, strings.HasPrefix(h[HeaderDLQError], "decode record readings/"), h[HeaderDLQError])
		sources[h[HeaderDLQPartition]+"@"+h[HeaderDLQOffset]]++
	}
	require.Len(t, sources, len(bad), "dead letters for distinct source records")
	if len(got) != len(bad) {
		var offs []int64
		for _, r := range got {
			offs = append(offs, r.Offset)
		}
		t.Logf("DLQ holds %d records for %d bad ones (DLQ offsets %v)", len(got), len(bad), offs)
	}
	m.stop(t)
	requireCommitted(t, addrs, "central", 2)
}

func fetchAt(t *testing.T, addrs []string, topic string, p int32, off int64) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(off)}}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		recs := cl.PollFetches(ctx).Records()
		if len(recs) > 0 {
			require.Equal(t, off, recs[0].Offset)
			return recs[0]
		}
	}
	t.Fatalf("no record at %s/%d@%d", topic, p, off)
	return nil
}

// produceSync writes recs to the readings topic.
func produceSync(t *testing.T, addrs []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

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

// TestDeadLetterStripsForgedHeaders is issue 17.11: a producer's own
// tflo-dlq-* headers were copied into its dead letter, so it could forge
// the reason or the origin a DLQ reader sees. They are dropped now (in
// any letter case); the producer's other headers are kept.
func TestDeadLetterStripsForgedHeaders(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := &kgo.Record{Key: []byte("s-1"), Value: []byte("not json"), Headers: []kgo.RecordHeader{
		{Key: HeaderDLQError, Value: []byte("forged: all is fine")},
		{Key: HeaderDLQTopic, Value: []byte("elsewhere")},
		{Key: "TFLO-DLQ-OFFSET", Value: []byte("999")},
		{Key: "trace-id", Value: []byte("abc")},
	}}
	produceSync(t, addrs, bad, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", 1)})
	j := &journal{}
	m := startMember(t, "m", memberOpts(addrs, seqGraph(t), memory.New(), j, "m")...)
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, m.src.Checkpoint(ctx))
	r := dlqRecords(t, addrs, 1)[0]
	require.Equal(t, []string{"readings"}, headerValues(r, HeaderDLQTopic))
	require.Equal(t, []string{"0"}, headerValues(r, HeaderDLQOffset))
	errs := headerValues(r, HeaderDLQError)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "invalid character")
	require.Equal(t, []string{"abc"}, headerValues(r, "trace-id"), "other headers are kept")
	m.stop(t)
}

// TestDeadLetterTooLargeIsTruncated is issue 17.7: a record just under
// the broker's message limit could not be dead-lettered once the DLQ
// headers were added (MESSAGE_TOO_LARGE), and the failure was kept, so
// every later checkpoint of the partition failed, restarts included. The
// dead letter now goes out truncated, with the original size and SHA-256
// in headers, and checkpoints carry on.
func TestDeadLetterTooLargeIsTruncated(t *testing.T) {
	const limit = 64 << 10
	c := newCluster(t, 1, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(limit)}))
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Random bytes (they do not compress, and do not decode) that fit the
	// limit with a hundred bytes to spare, fewer than the dead-letter
	// headers add.
	value := make([]byte, limit-200)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	value[0] = '~'
	produceSync(t, addrs, &kgo.Record{Key: []byte("s-1"), Value: value}) // the original fits the broker's limit
	produceSync(t, addrs, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", 1)})

	j := &journal{}
	store := memory.New()
	m := startMember(t, "m", memberOpts(addrs, seqGraph(t), store, j, "m")...)
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	for range 3 {
		require.NoError(t, m.src.Checkpoint(ctx), "the oversized dead letter must not fail checkpoints")
	}
	require.Equal(t, uint64(1), m.src.Stats().DeadLettered)
	require.Equal(t, uint64(0), m.src.Stats().DeadLetterErrors)

	r := dlqRecords(t, addrs, 1)[0]
	require.Equal(t, []string{"value"}, headerValues(r, HeaderDLQTruncated))
	require.Equal(t, []string{strconv.Itoa(len(value))}, headerValues(r, HeaderDLQValueBytes))
	sum := sha256.Sum256(value)
	require.Equal(t, []string{hex.EncodeToString(sum[:])}, headerValues(r, HeaderDLQValueSHA256))
	require.True(t, bytes.HasPrefix(value, r.Value), "the truncated value is a prefix of the original")
	require.Less(t, len(r.Value), len(value))
	require.Equal(t, []string{"0"}, headerValues(r, HeaderDLQOffset))
	require.Len(t, headerValues(r, HeaderDLQError), 1)
	m.stop(t)
	requireCommitted(t, addrs, "central", 1)
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

// TestRecordsOutOfLimitsAreDeadLettered is issues 17.1, 17.2 and 17.8 at
// the Kafka source: readings with a 1.7e308 value (operators' sums
// overflow and the checkpoint then refuses to load), a sensor id outside
// the key pattern or too long (its signal later fails to publish), or a
// ts far in the future or beyond int64 nanoseconds (ts × scale wrapped at
// central) were applied to state. They go to the DLQ now, with the
// reason, and the rest of the partition carries on.
func TestRecordsOutOfLimitsAreDeadLettered(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UnixMilli()
	long := strings.Repeat("k", 300)
	bad := map[string]string{ // value -> fragment of the reason
		fmt.Sprintf(`{"sensor":"s-1","ts":%d,"value":1.7e308}`, now):       "value 1.7e+308 is outside",
		fmt.Sprintf(`{"sensor":"a/b","ts":%d,"value":1}`, now):             `key "a/b" does not match`,
		fmt.Sprintf(`{"sensor":%q,"ts":%d,"value":1}`, long, now):          "longer than 128 bytes",
		fmt.Sprintf(`{"sensor":"s-1","ts":%d,"value":1}`, now+172_800_000): "ahead of the clock",
		`{"sensor":"s-1","ts":9300000000000000,"value":1}`:                 "does not fit the int64 nanosecond range",
	}
	var recs []*kgo.Record
	for v := range bad {
		recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: []byte(v)})
	}
	recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", 1)})
	produceSync(t, addrs, recs...)

	j := &journal{}
	m := startMember(t, "m", memberOpts(addrs, seqGraph(t), memory.New(), j, "m")...)
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, m.src.Checkpoint(ctx))
	require.Equal(t, uint64(len(bad)), m.src.Stats().DeadLettered)
	require.Equal(t, uint64(1), m.src.Stats().Applied, "only the good reading reaches state")
	for _, r := range dlqRecords(t, addrs, len(bad)) {
		frag, ok := bad[string(r.Value)]
		require.True(t, ok, "unexpected dead letter %q", r.Value)
		errs := headerValues(r, HeaderDLQError)
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], "reading out of limits")
		require.Contains(t, errs[0], frag)
		require.Less(t, len(errs[0]), 400, "a long key is shortened")
	}
	m.stop(t)
}
