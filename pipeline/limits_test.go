package pipeline_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// produceRaw writes recs to the readings topic.
func produceRaw(t *testing.T, addrs []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// dlqRecords reads n records of the dead-letter topic.
func dlqRecords(t *testing.T, addrs []string, n int) []*kgo.Record {
	t.Helper()
	dl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic+".dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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

// TestRecordsOutOfLimitsAreDeadLettered is issues 17.1, 17.2 and 17.8 at
// a Kafka source: readings with a 1.7e308 value (operators' sums overflow
// and the checkpoint then refuses to load), a sensor id outside the key
// pattern or too long (its signal later fails to publish), or a ts far in
// the future or beyond int64 nanoseconds (ts × scale wrapped) were applied
// to state. They go to the dead-letter topic now, with the reason, and
// the rest of the partition carries on.
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
	recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", 1)})
	produceRaw(t, addrs, recs...)

	j := newJournal()
	w := start(t, seqPipeline(addrs, memory.New(), j.as("w")), pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.w.Checkpoint(ctx))
	require.Equal(t, uint64(len(bad)), w.w.Stats().DeadLettered)
	require.Equal(t, uint64(1), w.w.Stats().RecordsIn, "only the good reading reaches state")
	for _, r := range dlqRecords(t, addrs, len(bad)) {
		frag, ok := bad[string(r.Value)]
		require.True(t, ok, "unexpected dead letter %q", r.Value)
		errs := headerValues(r, kafka.HeaderDLQError)
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], "reading out of limits")
		require.Contains(t, errs[0], frag)
		require.Less(t, len(errs[0]), 400, "a long key is shortened")
	}
	j.requireExactlyOnce(t, []string{"s-1"}, 1)
}

// TestLimitsFollowTheTimeUnit: the limits read the event time in the
// pipeline's time unit. The bug: the worker checked every ts as
// milliseconds, so a pipeline of nanosecond timestamps dead-lettered
// every record (ts × 1ms overflows int64 nanoseconds); the central worker
// passed its ts unit by hand, the runtime must do it for every spec.
func TestLimitsFollowTheTimeUnit(t *testing.T) {
	p := pipeline.Pipeline{
		Name:     "ns",
		Source:   pipeline.KafkaSource{Brokers: []string{"k:9092"}, Topic: "readings"},
		TimeUnit: pipeline.Nanoseconds,
		Graph: pipeline.Graph{Inputs: []pipeline.Input{{Name: "value"}},
			Nodes: []pipeline.Node{{Name: "sma", Type: "sma", Params: map[string]any{"window": 2}, Inputs: []string{"value"}}}},
	}
	now := time.Now().UnixNano()
	msgs := func(yield func(pipeline.Message) bool) {
		for i := range 5 {
			v := fmt.Appendf(nil, `{"sensor":"s-1","ts":%d,"value":%d}`, now-int64(5-i)*int64(time.Second), i)
			if !yield(pipeline.Message{Topic: "readings", Value: v}) {
				return
			}
		}
		// An hour and a day ahead of the clock, in nanoseconds: refused.
		yield(pipeline.Message{Topic: "readings", Value: fmt.Appendf(nil, `{"sensor":"s-1","ts":%d,"value":9}`, now+int64(25*time.Hour))})
	}
	st, err := pipeline.Evaluate(context.Background(), p, msgs, newRecorder())
	require.NoError(t, err)
	require.Equal(t, 5, st.Records, "nanosecond timestamps of now pass: %v", st.LastReason)
	require.Equal(t, 1, st.Rejected)
	require.ErrorIs(t, st.LastReason, streaming.ErrOutOfLimits)
	require.ErrorContains(t, st.LastReason, "ahead of the clock")

	// A limits unit that contradicts the time unit is refused.
	p.Limits.TSUnit = time.Millisecond
	require.ErrorContains(t, p.Validate(), `limits.ts_unit 1ms is not the event time's unit, time_unit "ns"`)
}

// TestDeadLetterStripsForgedHeaders is issue 17.11 at a pipeline's Kafka
// source: a producer's own tflo-dlq-* headers were copied into its dead
// letter, so it could forge the reason or the origin a DLQ reader sees.
// They are dropped (in any letter case); the producer's other headers are
// kept.
func TestDeadLetterStripsForgedHeaders(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := &kgo.Record{Key: []byte("s-1"), Value: []byte("not json"), Headers: []kgo.RecordHeader{
		{Key: kafka.HeaderDLQError, Value: []byte("forged: all is fine")},
		{Key: kafka.HeaderDLQTopic, Value: []byte("elsewhere")},
		{Key: "TFLO-DLQ-OFFSET", Value: []byte("999")},
		{Key: "trace-id", Value: []byte("abc")},
	}}
	produceRaw(t, addrs, bad, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", 1)})
	j := newJournal()
	w := start(t, seqPipeline(addrs, memory.New(), j.as("w")), pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.w.Checkpoint(ctx))
	r := dlqRecords(t, addrs, 1)[0]
	require.Equal(t, []string{topic}, headerValues(r, kafka.HeaderDLQTopic))
	require.Equal(t, []string{"0"}, headerValues(r, kafka.HeaderDLQOffset))
	errs := headerValues(r, kafka.HeaderDLQError)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "invalid character")
	require.Equal(t, []string{"abc"}, headerValues(r, "trace-id"), "other headers are kept")
}

// TestDeadLetterTooLargeIsTruncated is issue 17.7 at a pipeline's Kafka
// source: a record just under the broker's message limit could not be
// dead-lettered once the DLQ headers were added (MESSAGE_TOO_LARGE), and
// the failure was kept, so every later checkpoint of the partition failed,
// restarts included. The dead letter goes out truncated, with the
// original size and SHA-256 in headers, and checkpoints carry on.
func TestDeadLetterTooLargeIsTruncated(t *testing.T) {
	const limit = 64 << 10
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(limit)}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
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
	produceRaw(t, addrs, &kgo.Record{Key: []byte("s-1"), Value: value}) // the original fits the broker's limit
	produceRaw(t, addrs, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", 1)})

	j := newJournal()
	w := start(t, seqPipeline(addrs, memory.New(), j.as("w")), pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	for range 3 {
		require.NoError(t, w.w.Checkpoint(ctx), "the oversized dead letter must not fail checkpoints")
	}
	require.Equal(t, uint64(1), w.w.Stats().DeadLettered)
	require.Equal(t, uint64(0), w.w.Stats().DeadLetterErrors)

	r := dlqRecords(t, addrs, 1)[0]
	require.Equal(t, []string{"value"}, headerValues(r, kafka.HeaderDLQTruncated))
	require.Equal(t, []string{strconv.Itoa(len(value))}, headerValues(r, kafka.HeaderDLQValueBytes))
	sum := sha256.Sum256(value)
	require.Equal(t, []string{hex.EncodeToString(sum[:])}, headerValues(r, kafka.HeaderDLQValueSHA256))
	require.True(t, bytes.HasPrefix(value, r.Value), "the truncated value is a prefix of the original")
	require.Less(t, len(r.Value), len(value))
	require.Equal(t, []string{"0"}, headerValues(r, kafka.HeaderDLQOffset))
	require.Len(t, headerValues(r, kafka.HeaderDLQError), 1)
}

// TestSourceDeadLettersKeepBatchesUnderTheDLQTopicLimit: a Kafka
// source's default dead-letter sink connects lazily, and did not learn
// the dead-letter topic's max.message.bytes, so it batched dead letters up
// to kgo's default 1,000,012 bytes. A topic with a lower limit refused
// whole batches; each dead letter in them was truncated, batched again,
// refused again and dropped ("too large even truncated"): counted as
// errors, but lost. Each dead letter that fits the limit reaches the
// topic whole now.
func TestSourceDeadLettersKeepBatchesUnderTheDLQTopicLimit(t *testing.T) {
	const n = 40
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer admin.Close()
	limit := strconv.Itoa(64 << 10)
	_, err = kadm.NewClient(admin).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, topic+".dlq")
	require.NoError(t, err)
	// Random bytes (they do not compress, and do not decode): 40 dead
	// letters of 4 KiB, 160 KiB in all.
	rng := rand.New(rand.NewPCG(9, 10))
	recs := make([]*kgo.Record, 0, n+1)
	for range n {
		value := make([]byte, 4<<10)
		for i := range value {
			value[i] = byte(rng.Uint32())
		}
		value[0] = '~'
		recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: value})
	}
	produceRaw(t, addrs, append(recs, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", 1)})...)

	j := newJournal()
	w := start(t, seqPipeline(addrs, memory.New(), j.as("w")), pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, 1) }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.w.Checkpoint(ctx))
	require.Equal(t, uint64(n), w.w.Stats().DeadLettered)
	require.Equal(t, uint64(0), w.w.Stats().DeadLetterErrors, "dead letters lost")
	got := dlqRecords(t, addrs, n)
	require.Len(t, got, n)
	for _, r := range got {
		require.Empty(t, headerValues(r, kafka.HeaderDLQTruncated), "dead letter of offset %v truncated", headerValues(r, kafka.HeaderDLQOffset))
		require.Len(t, r.Value, 4<<10)
	}
}

// mqttDeadLetters collects the broker's dead letters on dlq/sensors: each
// payload with its tflo-reason.
type mqttDeadLetters struct {
	mu      sync.Mutex
	reasons map[string]string
}

func collectMQTTDeadLetters(t *testing.T, srv *mochi.Server) *mqttDeadLetters {
	t.Helper()
	d := &mqttDeadLetters{reasons: map[string]string{}}
	require.NoError(t, srv.Subscribe("dlq/sensors", 1, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		reason := ""
		for _, u := range pk.Properties.User {
			if u.Key == mqtt.PropReason {
				reason = u.Val
			}
		}
		d.mu.Lock()
		d.reasons[string(pk.Payload)] = reason
		d.mu.Unlock()
	}))
	return d
}

func (d *mqttDeadLetters) get() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]string, len(d.reasons))
	for k, v := range d.reasons {
		out[k] = v
	}
	return out
}

// TestMQTTLimitsAndTopicMatch: a pipeline's MQTT source applies the
// pipeline's limits and, by default, the topic rule (a sensor id that is
// not the last level of its topic is dead-lettered: a client the broker
// lets publish on sensors/attic cannot write boiler's state); the spec's
// require_topic_match: false lets such a reading through.
func TestMQTTLimitsAndTopicMatch(t *testing.T) {
	reading := func(sensor string, ts int64, v float64) []byte {
		return mqtt.EncodeReading(nil, mqtt.Reading{Sensor: sensor, TS: ts, Value: v})
	}
	good, huge, forged := reading("boiler", 1, 20), reading("boiler", 2, 5000), reading("boiler", 3, 21)

	e := newEdgeEnv(t)
	dl := collectMQTTDeadLetters(t, e.broker)
	p := e.pipeline(false, 0)
	p.Limits = streaming.Limits{MaxAbsValue: 1000}
	g := e.start(t, p)
	require.NoError(t, e.broker.Publish("sensors/boiler", good, false, 2))
	require.NoError(t, e.broker.Publish("sensors/boiler", huge, false, 2))
	require.NoError(t, e.broker.Publish("sensors/attic", forged, false, 2))
	require.Eventually(t, func() bool { return len(dl.get()) == 2 && g.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond,
		"dead letters %v, stats %+v", dl.get(), g.w.Stats())
	reasons := dl.get()
	require.Contains(t, reasons[string(huge)], "reading out of limits: value 5000 is outside ±1000")
	require.Contains(t, reasons[string(forged)], `sensor "boiler" is not "attic", the last level of topic "sensors/attic"`)
	// The count follows the dead letter's publish, which the broker saw first.
	require.Eventually(t, func() bool { return g.w.Stats().DeadLettered == 2 }, waitFor, time.Millisecond, "stats %+v", g.w.Stats())
	g.stop(t)

	e2 := newEdgeEnv(t)
	off := false
	p2 := e2.pipeline(false, 0)
	p2.Source = pipeline.MQTTSource{Servers: []string{"mqtt://" + e2.addr}, Topics: []string{"sensors/#"}, ClientID: "edge-gw-1",
		DeadLetterTopic: "dlq/sensors", OmitReceiveMaximum: true, RequireTopicMatch: &off}
	g2 := e2.start(t, p2)
	require.NoError(t, e2.broker.Publish("sensors/attic", forged, false, 2))
	require.Eventually(t, func() bool { return g2.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond)
	require.Zero(t, g2.w.Stats().DeadLettered)
}

// TestSpecLimitsAndMQTTKeys: a spec's limits section and the MQTT
// source's topic rule and packet size reach the pipeline value, with
// their defaults when absent.
func TestSpecLimitsAndMQTTKeys(t *testing.T) {
	spec := `name: edge
source:
  mqtt:
    servers: [mqtt://b:1883]
    topics: [sensors/#]
    dead_letter_topic: dlq/sensors
    require_topic_match: false
    max_packet_size: 1KiB
time_unit: s
limits:
  key_pattern: "[a-z]+"
  max_key_bytes: 16
  max_abs_value: 1e6
  max_ts_skew: 5m
  max_ts_age: 720h
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3}}
`
	p, err := pipeline.Parse([]byte(spec))
	require.NoError(t, err)
	require.Equal(t, streaming.Limits{KeyPattern: "[a-z]+", MaxKeyBytes: 16, MaxAbsValue: 1e6, MaxTSSkew: 5 * time.Minute, MaxTSAge: 720 * time.Hour, TSUnit: time.Second}, p.Limits)
	src := p.Source.(*pipeline.MQTTSource)
	require.False(t, *src.RequireTopicMatch)
	require.Equal(t, pipeline.ByteSize(1024), src.MaxPacketSize)

	p, err = pipeline.Parse([]byte(strings.NewReplacer("    require_topic_match: false\n", "", "    max_packet_size: 1KiB\n", "").Replace(spec)))
	require.NoError(t, err)
	src = p.Source.(*pipeline.MQTTSource)
	require.True(t, *src.RequireTopicMatch, "the topic rule is on by default")
	require.Equal(t, pipeline.ByteSize(mqtt.DefaultMaxPacketSize), src.MaxPacketSize)

	// The largest Maximum Packet Size MQTT can announce is 4GiB - 1, and
	// the refusal of 4GiB says so. Bug: it said "between 1 byte and 4GiB"
	// while refusing 4GiB itself.
	p, err = pipeline.Parse([]byte(strings.Replace(spec, "max_packet_size: 1KiB", "max_packet_size: 4294967295", 1)))
	require.NoError(t, err)
	require.Equal(t, pipeline.ByteSize(4294967295), p.Source.(*pipeline.MQTTSource).MaxPacketSize)
	_, err = pipeline.Parse([]byte(strings.Replace(spec, "max_packet_size: 1KiB", "max_packet_size: 4GiB", 1)))
	require.ErrorContains(t, err, "source.mqtt.max_packet_size 4294967296 must be between 1 byte and 4294967295 bytes (4GiB - 1")

	_, err = pipeline.Parse([]byte(strings.Replace(spec, `key_pattern: "[a-z]+"`, `key_pattern: "[a-z"`, 1)))
	require.ErrorContains(t, err, `limits.key_pattern: key pattern "[a-z"`)
}

// TestSpecLimitProblemsNameTheirKeyAndLine: a spec's limits out of range
// were reported as streaming's problems joined under the section's line:
// the first as `pipeline "t": line 4: limits: key pattern ...`, the
// others as bare "limits: max key bytes -1 ..." lines, naming neither
// the pipeline, nor the key, nor its line. Each names its key path and
// line now.
func TestSpecLimitProblemsNameTheirKeyAndLine(t *testing.T) {
	_, err := pipeline.Parse([]byte(`name: t
source:
  kafka: {brokers: [k:9092], topic: readings}
limits:
  key_pattern: "(("
  max_key_bytes: -1
  max_abs_value: -5
  max_ts_age: -1s
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3}}
`))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{
		`pipeline "t": line 5: limits.key_pattern: key pattern "((": `,
		`pipeline "t": line 6: limits.max_key_bytes: max key bytes -1 must be positive`,
		`pipeline "t": line 7: limits.max_abs_value: max absolute value -5 must be a positive finite number`,
		`pipeline "t": line 8: limits.max_ts_age: max ts age -1s must not be negative`,
	} {
		require.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) }), "no line %q in:\n%v", want, err)
	}
	require.Len(t, lines, 4, "one line a problem:\n%v", err)
}

// TestDeadLetterLogIsSampled: a stream of bad records writes a sample of
// "record dead-lettered" lines, not one per record (the log flooded and
// the hot path waited on stderr), while every record is dead-lettered
// and counted.
func TestDeadLetterLogIsSampled(t *testing.T) {
	const n = 300
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte("s-1"), Value: []byte("not a reading " + strconv.Itoa(i))}
	}
	produceRaw(t, addrs, recs...)

	logged := logtest.NewCounter("record dead-lettered")
	began := time.Now()
	w := start(t, alarmPipeline(addrs, t.TempDir()), pipeline.WithLogger(logged.Logger()))
	require.Eventually(t, func() bool { return w.w.Stats().DeadLettered == n }, 20*time.Second, 5*time.Millisecond)
	elapsed := time.Since(began)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, w.w.Checkpoint(ctx), "the dead letters are delivered")
	require.Zero(t, w.w.Stats().DeadLetterErrors)
	logged.RequireSampled(t, n, elapsed)
}
