package pipeline_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// strictSum sums its input; its Load refuses a sum above 1e12, as SMA's
// Load refuses the non-finite sum an older version saved: a state that
// saves but does not load.
type strictSum struct {
	streaming.Base
	sum float64
}

func (*strictSum) Name() string        { return "strictsum" }
func (*strictSum) TypeVersion() uint32 { return 1 }
func (o *strictSum) Reset()            { o.sum = 0 }
func (o *strictSum) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	o.sum += in[0].Float64()
	return streaming.Emit(streaming.Float(o.sum))
}
func (o *strictSum) Save() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, math.Float64bits(o.sum)), nil
}
func (o *strictSum) Load(b []byte) error {
	if len(b) != 8 {
		return &streaming.OperatorLoadError{Operator: "strictsum", Reason: "want 8 bytes"}
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(b))
	if v > 1e12 {
		return &streaming.OperatorLoadError{Operator: "strictsum", Reason: fmt.Sprintf("sum %g is above 1e12", v)}
	}
	o.sum = v
	return nil
}

func sumRegistry(t testing.TB) *streaming.Registry {
	r := pipeline.NewRegistry()
	require.NoError(t, r.Register(streaming.OperatorType{
		Name: "strictsum", Doc: "Sums its input; refuses to load a sum above 1e12.", MinInputs: 1, MaxInputs: 1,
		Output: "value: the sum", TypeVersion: 1,
		New: func(streaming.Params) (func() streaming.Operator, error) {
			return func() streaming.Operator { return &strictSum{} }, nil
		},
	}))
	return r
}

// sumPipeline sums each sensor's readings from the one-partition topic.
func sumPipeline(addrs []string, dir string, state pipeline.State, sinks ...pipeline.SinkSpec) pipeline.Pipeline {
	state.Memory = 96 << 20
	state.Durable = pipeline.Durable{Dir: dir}
	return pipeline.Pipeline{
		Name:   "sums",
		Source: pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 10 * time.Second},
		Graph: pipeline.Graph{Inputs: []pipeline.Input{{Name: "value"}},
			Nodes: []pipeline.Node{{Name: "sum", Type: "strictsum", Inputs: []string{"value"}}}},
		Sinks:      sinks,
		State:      state,
		Checkpoint: pipeline.Checkpoint{Interval: time.Hour},
	}
}

func sumReading(key string, seq int, value float64) *kgo.Record {
	return &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%v}`, key, time.Now().UnixMilli()+int64(seq), value)}
}

// lastSums is the newest sum per key a recorder saw.
func lastSums(r *recorder) map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	newest := map[string]int64{}
	out := map[string]float64{}
	for k, v := range r.outs {
		if k.ts >= newest[k.key] {
			newest[k.key], out[k.key] = k.ts, v.value
		}
	}
	return out
}

// TestCorruptKeyStateIsQuarantined is issue 17.1: one key whose state in
// the checkpoint does not load failed its shard's records for good (the
// shard's Handle returned the load error at the key's next record). Now
// the key is quarantined — reset, counted, logged — and the shard and
// every other key carry on from the checkpoint.
func TestCorruptKeyStateIsQuarantined(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	dir := t.TempDir()
	rec := newRecorder()
	p := sumPipeline(addrs, dir, pipeline.State{}, rec.shared())
	reg := pipeline.WithOperators(sumRegistry(t))

	produceRaw(t, addrs, sumReading("good-1", 1, 1), sumReading("poison", 2, 5e12), sumReading("good-2", 3, 2))
	a := start(t, p, reg, pipeline.WithWorkerID("a"))
	require.Eventually(t, func() bool { return a.w.Stats().RecordsIn == 3 }, 20*time.Second, 5*time.Millisecond)
	a.stop(t) // the final checkpoint saves poison's sum, which no longer loads

	produceRaw(t, addrs, sumReading("good-1", 4, 10), sumReading("poison", 5, 7), sumReading("good-2", 6, 20))
	b := start(t, p, reg, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return b.w.Stats().RecordsIn == 3 }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(1), b.w.Stats().KeysQuarantined)
	require.Equal(t, map[string]float64{"good-1": 11, "good-2": 22, "poison": 7}, lastSums(rec),
		"poison starts afresh, the others continue from the checkpoint")
	require.Equal(t, 1, b.w.Stats().Owned)
	b.stop(t)
}

// TestQuarantineLogIsSampled: every quarantined key wrote a warning, so
// a checkpoint whose keys' state no longer loads (a poisoned value in
// many keys) flooded the log with one line per key as each was first
// seen. The line is sampled as a dead letter's is; the count stays exact.
func TestQuarantineLogIsSampled(t *testing.T) {
	const n = 300
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	dir := t.TempDir()
	p := sumPipeline(addrs, dir, pipeline.State{})
	reg := pipeline.WithOperators(sumRegistry(t))
	poison := func(seq int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = sumReading(fmt.Sprintf("poison-%d", i), seq+i, 5e12)
		}
		return recs
	}
	produceRaw(t, addrs, poison(0)...)
	a := start(t, p, reg, pipeline.WithWorkerID("a"))
	require.Eventually(t, func() bool { return a.w.Stats().RecordsIn == n }, 20*time.Second, 5*time.Millisecond)
	a.stop(t) // the final checkpoint saves sums that no longer load

	produceRaw(t, addrs, poison(n)...)
	logged := logtest.NewCounter("key quarantined: its stored state does not load; it starts afresh")
	began := time.Now()
	b := start(t, p, reg, pipeline.WithWorkerID("b"), pipeline.WithLogger(logged.Logger()))
	require.Eventually(t, func() bool { return b.w.Stats().RecordsIn == n }, 20*time.Second, 5*time.Millisecond)
	elapsed := time.Since(began)
	require.Equal(t, uint64(n), b.w.Stats().KeysQuarantined)
	logged.RequireSampled(t, n, elapsed)
	b.stop(t)
}

// TestNewKeysOverTheCapAreDeadLettered is issue 17.4: random sensor ids
// grew a shard's keys without bound. Over state.max_keys a new key's
// record goes to the dead-letter topic with the reason, and the keys
// held carry on. The reason names state.max_keys and is not a decode
// failure (it read "decode record <topic>/0@3: new key ...").
func TestNewKeysOverTheCapAreDeadLettered(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	rec := newRecorder()
	p := sumPipeline(addrs, t.TempDir(), pipeline.State{MaxKeys: 3}, rec.shared())
	reg := pipeline.WithOperators(sumRegistry(t))

	var recs []*kgo.Record
	for i, k := range []string{"k1", "k2", "k3", "r1", "r2", "k1", "k2", "k3"} {
		recs = append(recs, sumReading(k, i, 1))
	}
	produceRaw(t, addrs, recs...)
	w := start(t, p, reg)
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == 6 && w.w.Stats().DeadLettered == 2 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.w.Checkpoint(context.Background()))
	require.Equal(t, uint64(2), w.w.Stats().KeysRefused)
	require.Equal(t, map[string]float64{"k1": 2, "k2": 2, "k3": 2}, lastSums(rec))
	for _, r := range dlqRecords(t, addrs, 2) {
		require.Contains(t, []string{"r1", "r2"}, string(r.Key))
		errs := headerValues(r, kafka.HeaderDLQError)
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], "the shard holds 3 keys, its cap")
		require.Contains(t, errs[0], "over state.max_keys")
		require.NotContains(t, errs[0], "decode record")
		require.True(t, strings.Contains(errs[0], `"r1"`) || strings.Contains(errs[0], `"r2"`), errs[0])
	}
}

// TestIdleKeysExpire is issue 17.4: a key never seen again was kept
// forever. With state.key_ttl it is dropped with its state: its next
// record starts afresh, even on another worker restoring the checkpoint.
func TestIdleKeysExpire(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	dir := t.TempDir()
	rec := newRecorder()
	p := sumPipeline(addrs, dir, pipeline.State{KeyTTL: time.Second}, rec.shared())
	reg := pipeline.WithOperators(sumRegistry(t))

	produceRaw(t, addrs, sumReading("a", 1, 1), sumReading("b", 2, 2), sumReading("c", 3, 3))
	w := start(t, p, reg, pipeline.WithWorkerID("a"))
	require.Eventually(t, func() bool { return w.w.Stats().KeysExpired == 3 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, uint64(3), w.w.Stats().RecordsIn)
	w.stop(t) // the final checkpoint records the deletions

	produceRaw(t, addrs, sumReading("a", 4, 10), sumReading("b", 5, 20))
	w2 := start(t, p, reg, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return w2.w.Stats().RecordsIn == 2 }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, map[string]float64{"a": 10, "b": 20, "c": 3}, lastSums(rec), "a and b start afresh")
}

// TestMQTTNewKeysOverTheCapAreDeadLettered: at an MQTT source a new key
// over state.max_keys stopped the source (the handler's error ends Run);
// the reading goes to the dead-letter topic with the reason instead.
func TestMQTTNewKeysOverTheCapAreDeadLettered(t *testing.T) {
	reading := func(sensor string, ts int64) []byte {
		return mqtt.EncodeReading(nil, mqtt.Reading{Sensor: sensor, TS: ts, Value: 20})
	}
	e := newEdgeEnv(t)
	dl := collectMQTTDeadLetters(t, e.broker)
	p := e.pipeline(false, 0)
	p.State.MaxKeys = 1
	g := e.start(t, p)
	first, second, again := reading("boiler", 1), reading("attic", 2), reading("boiler", 3)
	require.NoError(t, e.broker.Publish("sensors/boiler", first, false, 2))
	require.NoError(t, e.broker.Publish("sensors/attic", second, false, 2))
	require.NoError(t, e.broker.Publish("sensors/boiler", again, false, 2))
	require.Eventually(t, func() bool { return len(dl.get()) == 1 && g.w.Stats().RecordsIn == 2 }, waitFor, time.Millisecond,
		"dead letters %v, stats %+v", dl.get(), g.w.Stats())
	require.Contains(t, dl.get()[string(second)], `new key "attic" refused: the shard holds 1 keys, its cap`)
	require.Contains(t, dl.get()[string(second)], "over state.max_keys", "the reason names the setting, as at a Kafka source")
	require.Equal(t, uint64(1), g.w.Stats().KeysRefused)
	g.stop(t)
}

// TestMQTTKeyTooLongForTheStateIsDeadLettered: as at a Kafka source, a
// reading whose sensor id the limits let through but the keyed state
// cannot store is dead-lettered with the reason. Before, it failed the
// source, and would again at every delivery of the message.
func TestMQTTKeyTooLongForTheStateIsDeadLettered(t *testing.T) {
	e := newEdgeEnv(t)
	dl := collectMQTTDeadLetters(t, e.broker)
	p := e.pipeline(false, 0)
	p.Limits = streaming.Limits{KeyPattern: `(?s).+`, MaxKeyBytes: 100_000}
	src := p.Source.(pipeline.MQTTSource)
	src.MaxPacketSize = 1 << 20 // the topic and the reading each hold the id
	p.Source = src
	g := e.start(t, p)
	sensor := strings.Repeat("x", keyedstate.MaxKeyBytes)
	long := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: sensor, TS: 1, Value: 20})
	require.NoError(t, e.broker.Publish("sensors/"+sensor, long, false, 2))
	require.NoError(t, e.broker.Publish("sensors/boiler", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "boiler", TS: 2, Value: 20}), false, 2))
	require.Eventually(t, func() bool { return len(dl.get()) == 1 && g.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond,
		"dead letters %d, stats %+v", len(dl.get()), g.w.Stats())
	require.Contains(t, dl.get()[string(long)], "over Badger's 65000")
	require.NoError(t, g.w.Err())
	g.stop(t)
}

// TestSpecKeyBounds: state.max_keys and state.key_ttl reach the pipeline,
// with the default cap when absent, and bad values are refused.
func TestSpecKeyBounds(t *testing.T) {
	spec := `name: plant
source: {kafka: {brokers: [k:9092], topic: readings}}
graph:
  inputs: [value]
  nodes: [{name: sma, type: sma, inputs: [value], params: {window: 3}}]
state: {max_keys: 5000, key_ttl: 24h}
`
	p, err := pipeline.Parse([]byte(spec))
	require.NoError(t, err)
	require.Equal(t, 5000, p.State.MaxKeys)
	require.Equal(t, 24*time.Hour, p.State.KeyTTL)

	p, err = pipeline.Parse([]byte(strings.Replace(spec, "state: {max_keys: 5000, key_ttl: 24h}\n", "", 1)))
	require.NoError(t, err)
	require.Equal(t, pipeline.DefaultMaxKeys, p.State.MaxKeys)
	require.Zero(t, p.State.KeyTTL)

	p.State.MaxKeys, p.State.KeyTTL = -2, 10*time.Millisecond
	err = p.Validate()
	require.ErrorContains(t, err, "state.max_keys -2 must be positive (-1: no cap)")
	require.ErrorContains(t, err, "state.key_ttl 10ms must be at least 1s")
}

// TestSpecAllowNonRestoredState: state.allow_non_restored_state reaches
// the pipeline (default false), and a misspelt key is refused, naming it.
func TestSpecAllowNonRestoredState(t *testing.T) {
	spec := `name: plant
source: {kafka: {brokers: [k:9092], topic: readings}}
graph:
  inputs: [value]
  nodes: [{name: sma, type: sma, inputs: [value], params: {window: 3}}]
state: {allow_non_restored_state: true}
`
	p, err := pipeline.Parse([]byte(spec))
	require.NoError(t, err)
	require.True(t, p.State.AllowNonRestoredState)

	p, err = pipeline.Parse([]byte(strings.Replace(spec, "state: {allow_non_restored_state: true}\n", "", 1)))
	require.NoError(t, err)
	require.False(t, p.State.AllowNonRestoredState)

	_, err = pipeline.Parse([]byte(strings.Replace(spec, "allow_non_restored_state", "allow_nonrestored_state", 1)))
	require.ErrorContains(t, err, "line 6: state.allow_nonrestored_state: unknown key")
}

// blowup outputs value/(value−13): +Inf for 13, a non-finite output that
// keeps no state.
type blowup struct{ streaming.Base }

func (*blowup) Name() string        { return "blowup" }
func (*blowup) TypeVersion() uint32 { return 1 }
func (*blowup) Reset()              {}
func (*blowup) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	v := in[0].Float64()
	return streaming.Emit(streaming.Float(v / (v - 13)))
}
func (*blowup) Save() ([]byte, error) { return nil, nil }
func (*blowup) Load([]byte) error     { return nil }

// TestNonFiniteOutputDoesNotFailCheckpoints is issue 17.1 at a pipeline's
// Kafka sink: an output of +Inf failed the sink's JSON encoding, the
// failure was kept, and every later checkpoint of the worker failed. The
// sink drops and counts the output; the others are published and
// checkpoints carry on.
func TestNonFiniteOutputDoesNotFailCheckpoints(t *testing.T) {
	c := newCluster(t, 1, "readings.out")
	addrs := c.ListenAddrs()
	reg := pipeline.NewRegistry()
	require.NoError(t, reg.Register(streaming.OperatorType{
		Name: "blowup", Doc: "value/(value-13)", MinInputs: 1, MaxInputs: 1, Output: "value", TypeVersion: 1,
		New: func(streaming.Params) (func() streaming.Operator, error) {
			return func() streaming.Operator { return &blowup{} }, nil
		},
	}))
	p := sumPipeline(addrs, t.TempDir(), pipeline.State{}, pipeline.KafkaSink{Topic: "readings.out"})
	p.Graph.Nodes = []pipeline.Node{{Name: "ratio", Type: "blowup", Inputs: []string{"value"}}}
	metrics := prometheus.NewRegistry()
	produceRaw(t, addrs, sumReading("s-1", 1, 12), sumReading("s-1", 2, 13), sumReading("s-1", 3, 14))
	w := start(t, p, pipeline.WithOperators(reg), pipeline.WithMetrics(metrics))
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == 3 }, 20*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, w.w.Checkpoint(ctx))
	produceRaw(t, addrs, sumReading("s-1", 4, 15))
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == 4 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.w.Checkpoint(ctx), "the next checkpoint too")
	require.Equal(t, 1.0, gather(t, metrics, "tflo_pipeline_sink_dropped_total"))

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("readings.out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var values []string
	for len(values) < 3 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	require.Len(t, values, 3)
	for i, want := range []string{`"value":-12}`, `"value":14}`, `"value":7.5}`} {
		require.True(t, strings.HasSuffix(values[i], want), "%s does not end in %s", values[i], want)
	}
}

// TestKeyTooLongForTheStateIsDeadLettered: a pipeline whose limits let
// through a key longer than the keyed state stores (Badger's 65,000
// bytes with the shard's prefix) dead-letters its record with the
// reason, and the shard carries on. Before, the record failed the
// shard, and would again at every replay after a restore.
func TestKeyTooLongForTheStateIsDeadLettered(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	rec := newRecorder()
	p := sumPipeline(addrs, t.TempDir(), pipeline.State{}, rec.shared())
	p.Limits = streaming.Limits{KeyPattern: `(?s).+`, MaxKeyBytes: 100_000}
	reg := pipeline.WithOperators(sumRegistry(t))

	long := strings.Repeat("x", keyedstate.MaxKeyBytes)
	produceRaw(t, addrs, sumReading("k1", 1, 1), sumReading(long, 2, 1), sumReading("k1", 3, 1))
	w := start(t, p, reg)
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == 2 && w.w.Stats().DeadLettered == 1 }, 20*time.Second, 5*time.Millisecond,
		"stats %+v", w.w.Stats())
	require.NoError(t, w.w.Checkpoint(context.Background()))
	require.Equal(t, map[string]float64{"k1": 2}, lastSums(rec))
	r := dlqRecords(t, addrs, 1)[0]
	errs := headerValues(r, kafka.HeaderDLQError)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "over Badger's 65000")
}
