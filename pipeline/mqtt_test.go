package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

const (
	waitFor      = 15 * time.Second
	signalsTopic = "edge.signals"
)

// edgeEnv is an MQTT broker, a Kafka cluster and a durable store that
// gateways come and go over.
type edgeEnv struct {
	broker *mochi.Server
	// stopBroker closes broker (idempotent).
	stopBroker func()
	addr       string
	kafka      *kfake.Cluster
	store      *memory.Store
}

func newEdgeEnv(t testing.TB) *edgeEnv {
	t.Helper()
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, signalsTopic))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	return &edgeEnv{broker: b.Server(), stopBroker: func() { _ = b.Close() }, addr: b.Addr(), kafka: kc, store: memory.New()}
}

// edgeGateway is the iot-portal edge as a pipeline value: readings from
// MQTT → SMA(3) → hysteresis 20/25 → a confirmed crossing of the mode →
// a signal envelope on Kafka.
func (e *edgeEnv) pipeline(ackOnCheckpoint bool, interval time.Duration) pipeline.Pipeline {
	return pipeline.Pipeline{
		Name: "edge",
		Source: pipeline.MQTTSource{Servers: []string{"mqtt://" + e.addr}, Topics: []string{"sensors/#"}, ClientID: "edge-gw-1",
			DeadLetterTopic: "dlq/sensors", OmitReceiveMaximum: true, AckOnCheckpoint: &ackOnCheckpoint},
		Graph: pipeline.Graph{
			Inputs: []pipeline.Input{{Name: "value"}},
			Nodes: []pipeline.Node{
				{Name: "smooth", Type: "sma", Params: map[string]any{"window": 3}, Inputs: []string{"value"}},
				{Name: "mode", Type: "hysteresis", Params: map[string]any{"low": 20, "high": 25}, Inputs: []string{"smooth"}},
				{Name: "alarm", Type: "threshold_cross", Params: map[string]any{"threshold": 0.5, "level": "mode"}, Inputs: []string{"mode"}},
			},
			Outputs: []string{"alarm", "smooth", "value"},
		},
		Sinks: []pipeline.SinkSpec{pipeline.KafkaSink{Brokers: e.kafka.ListenAddrs(), Topic: signalsTopic, Format: pipeline.FormatSignalEnvelope,
			Envelope: &pipeline.Envelope{Trigger: "alarm", Modes: map[string]string{"up": "raised", "down": "cleared"},
				Payload: []pipeline.PayloadField{{Name: "smoothed", From: "smooth"}, {Name: "raw", From: "value"}, {Name: "topic", From: "$topic"}}}}},
		State:      pipeline.State{Memory: 96 << 20, Durable: pipeline.Durable{Store: e.store}},
		Checkpoint: pipeline.Checkpoint{Interval: interval, Disabled: interval == 0},
	}
}

func (e *edgeEnv) start(t testing.TB, p pipeline.Pipeline, opts ...pipeline.Option) *running {
	t.Helper()
	g := start(t, p, append([]pipeline.Option{pipeline.WithWorkerID("edge-gw-1")}, opts...)...)
	require.Eventually(t, func() bool { return g.w.Stats().Subscribed }, waitFor, time.Millisecond)
	return g
}

type rd struct {
	sensor string
	ts     int64
	v      float64
}

// edgeSignal is a signal as the envelope carries it.
type edgeSignal struct {
	key, mode, topic string
	ts               int64
	partition        int32
}

// expectSignals is an independent reference of the edge graph: SMA of 3,
// hysteresis rising at >= 25 and falling at <= 20, a signal on every
// change of mode after the first smoothed value.
func expectSignals(rs []rd) map[string][]string {
	type st struct {
		win   []float64
		known bool
		high  bool
	}
	s := map[string]*st{}
	out := map[string][]string{}
	for _, r := range rs {
		x := s[r.sensor]
		if x == nil {
			x = &st{}
			s[r.sensor] = x
		}
		x.win = append(x.win, r.v)
		if len(x.win) > 3 {
			x.win = x.win[1:]
		}
		if len(x.win) < 3 {
			continue
		}
		sm := (x.win[0] + x.win[1] + x.win[2]) / 3
		high := x.high
		if !high && sm >= 25 {
			high = true
		} else if high && sm <= 20 {
			high = false
		}
		if x.known && high != x.high {
			m := "cleared"
			if high {
				m = "raised"
			}
			out[r.sensor] = append(out[r.sensor], m)
		}
		x.known, x.high = true, high
	}
	return out
}

// consumeSignals reads n signals from the topic.
func (e *edgeEnv) consumeSignals(t testing.TB, n int) []edgeSignal {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.ListenAddrs()...), kgo.ConsumeTopics(signalsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []edgeSignal
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d signals", len(out), n)
		fs.EachRecord(func(r *kgo.Record) {
			type payload struct {
				Topic string `json:"topic"`
			}
			sig, _, err := kafka.DecodeSignal[string, payload](r.Value)
			require.NoError(t, err)
			require.Equal(t, sig.Key, string(r.Key), "record key is the sensor id")
			out = append(out, edgeSignal{key: sig.Key, mode: sig.Mode, topic: sig.Payload.Topic, ts: sig.TS, partition: r.Partition})
		})
	}
	return out
}

// TestMQTTPipelineRestoresStateAndDedupWindow: the edge as a pipeline.
// Readings are injected as QoS 2 PUBLISHes with known packet ids; after a
// checkpoint and a clean stop, a new worker on the same store and session
// restores the sensors' state and the dedup window, so a redelivery of a
// checkpointed message is dropped, and the signals on Kafka equal an
// independent reference over all the readings.
func TestMQTTPipelineRestoresStateAndDedupWindow(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	g1 := e.start(t, p)
	cl, ok := e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)

	var injected []packets.Packet
	inject := func(id uint16, r rd, dup bool) {
		pk := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2, Dup: dup},
			TopicName:   "sensors/" + r.sensor,
			Payload:     mqtt.EncodeReading(nil, mqtt.Reading{Sensor: r.sensor, TS: r.ts, Value: r.v}),
			PacketID:    id,
			Created:     time.Now().Unix(),
		}
		cl.State.Inflight.Set(pk)
		require.NoError(t, cl.WritePacket(pk))
		require.Eventually(t, func() bool { _, ok := cl.State.Inflight.Get(id); return !ok }, waitFor, time.Millisecond)
		injected = append(injected, pk)
	}
	phase1 := []rd{
		{"boiler", 1, 19}, {"attic", 1, 10}, {"boiler", 2, 21}, {"boiler", 3, 23},
		{"boiler", 4, 30}, {"boiler", 5, 31}, {"attic", 2, 11}, {"attic", 3, 12},
		{"boiler", 6, 29}, {"boiler", 7, 12},
	}
	phase2 := []rd{
		{"boiler", 8, 11}, {"boiler", 9, 10}, {"attic", 4, 40}, {"attic", 5, 41},
		{"attic", 6, 42}, {"boiler", 10, 30}, {"boiler", 11, 30}, {"boiler", 12, 30},
	}
	id := uint16(100)
	for _, r := range phase1 {
		id++
		inject(id, r, false)
	}
	require.Eventually(t, func() bool { return g1.w.Stats().RecordsIn == uint64(len(phase1)) }, waitFor, time.Millisecond)
	require.NoError(t, g1.w.Checkpoint(context.Background()))
	g1.stop(t) // a clean stop checkpoints again

	g2 := e.start(t, p)
	cl, ok = e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)
	last := injected[len(injected)-1]
	inject(last.PacketID, rd{"boiler", 7, 12}, true) // a message the checkpoint already contains
	for _, r := range phase2 {
		id++
		inject(id, r, false)
	}
	require.Eventually(t, func() bool { return g2.w.Stats().RecordsIn == uint64(len(phase2)) }, waitFor, time.Millisecond)
	assert.Equal(t, uint64(1), g2.w.Stats().Duplicates, "the redelivery was dropped by the restored window")
	require.Positive(t, g2.w.Shards()[0].Restored)

	want := expectSignals(append(append([]rd{}, phase1...), phase2...))
	total := 0
	for _, ms := range want {
		total += len(ms)
	}
	require.Positive(t, total)
	bySensor := map[string][]string{}
	partitionOf := map[string]int32{}
	for _, s := range e.consumeSignals(t, total) {
		if p, seen := partitionOf[s.key]; seen {
			assert.Equal(t, p, s.partition, "one sensor, one partition")
		}
		partitionOf[s.key] = s.partition
		bySensor[s.key] = append(bySensor[s.key], s.mode)
		assert.Equal(t, "sensors/"+s.key, s.topic)
	}
	assert.Equal(t, want, bySensor)
}

// TestMQTTCrashBetweenCheckpointsAppliesEveryReadingOnce runs the gateway
// with acknowledgements deferred to checkpoints, crashes it (no final
// checkpoint, no acks) after readings it handled but did not checkpoint,
// and starts a new one on the same store and session: the broker
// redelivers the unacknowledged readings, the restored state lacks them,
// so each is applied once — the signals (deduplicated by sensor, ts and
// mode, since outputs are at least once) equal an uninterrupted run.
func TestMQTTCrashBetweenCheckpointsAppliesEveryReadingOnce(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(true, 0)
	g1 := e.start(t, p)
	publish := func(rs []rd) {
		for _, r := range rs {
			payload := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: r.sensor, TS: r.ts, Value: r.v})
			require.NoError(t, e.broker.Publish("sensors/"+r.sensor, payload, false, 2))
		}
	}
	phase1 := []rd{{"boiler", 1, 19}, {"boiler", 2, 21}, {"boiler", 3, 23}, {"boiler", 4, 30}, {"attic", 1, 10}}
	// One reading per sensor in phase 2: mochi redelivers a session's
	// in-flight messages sorted by creation second, not in publish order.
	phase2 := []rd{{"boiler", 5, 31}, {"attic", 2, 30}}
	phase3 := []rd{{"boiler", 6, 29}, {"boiler", 7, 12}, {"attic", 3, 31}, {"boiler", 8, 11}, {"boiler", 9, 10},
		{"attic", 4, 32}, {"attic", 5, 10}, {"attic", 6, 9}, {"attic", 7, 8}}

	publish(phase1)
	require.Eventually(t, func() bool { return g1.w.Stats().RecordsIn == uint64(len(phase1)) }, waitFor, time.Millisecond)
	require.NoError(t, g1.w.Checkpoint(context.Background()))
	publish(phase2)
	require.Eventually(t, func() bool { return g1.w.Stats().RecordsIn == uint64(len(phase1)+len(phase2)) }, waitFor, time.Millisecond)
	cl, ok := e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)
	require.Eventually(t, func() bool { return cl.State.Inflight.Len() == len(phase2) }, waitFor, time.Millisecond,
		"phase 1 acknowledged at the checkpoint, phase 2 awaiting one")
	pipeline.CrashOnStop(g1.w)
	g1.stop(t)

	g2 := e.start(t, p)
	require.Eventually(t, func() bool { return g2.w.Stats().RecordsIn == uint64(len(phase2)) }, waitFor, time.Millisecond,
		"the broker redelivers the unacknowledged phase 2")
	publish(phase3)
	require.Eventually(t, func() bool { return g2.w.Stats().RecordsIn == uint64(len(phase2)+len(phase3)) }, waitFor, time.Millisecond)
	require.NoError(t, g2.w.Checkpoint(context.Background())) // flushes the signals

	want := expectSignals(append(append(append([]rd{}, phase1...), phase2...), phase3...))
	total := 0
	for _, ms := range want {
		total += len(ms)
	}
	type sigKey struct {
		key, mode string
		ts        int64
	}
	seen := map[sigKey]bool{}
	bySensor := map[string][]string{}
	for _, s := range e.consumeSignals(t, total) {
		k := sigKey{s.key, s.mode, s.ts}
		if !seen[k] {
			seen[k] = true
			bySensor[s.key] = append(bySensor[s.key], s.mode)
		}
	}
	assert.Equal(t, want, bySensor)

	// The state itself: boiler's smoothing window holds exactly its last
	// three readings (12, 11, 10), each applied once: with 12 more it
	// averages (11+10+12)/3.
	in, err := pipeline.KeyState(g2.w, "boiler")
	require.NoError(t, err)
	require.NotNil(t, in)
	in.Eval(100, streaming.Float(12))
	smooth, _ := in.Value("smooth")
	assert.InDelta(t, 11.0, smooth.Float64(), 1e-9)
}

// TestMQTTCheckpointTimer: the worker checkpoints its MQTT shard every
// interval while it runs; with acknowledgements deferred to checkpoints
// the broker's flows complete without an explicit checkpoint.
func TestMQTTCheckpointTimer(t *testing.T) {
	e := newEdgeEnv(t)
	g := e.start(t, e.pipeline(true, 20*time.Millisecond))
	for i := range 5 {
		payload := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "s", TS: int64(i), Value: 1})
		require.NoError(t, e.broker.Publish("sensors/s", payload, false, 2))
	}
	cl, ok := e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)
	// The acknowledgements go out once the state is saved, a moment
	// before the checkpoint's cursor commit completes it.
	require.Eventually(t, func() bool {
		return g.w.Stats().RecordsIn == 5 && cl.State.Inflight.Len() == 0 && g.w.Shards()[0].Checkpoint.LastID != 0
	}, waitFor, time.Millisecond)
}

// TestMQTTDeadLettersGoToTheDeadLetterSink: with Pipeline.DeadLetter set,
// an MQTT source's malformed payloads reach that sink (through the
// streaming.Sink contract, before the messages are acknowledged), not the
// broker's dead-letter topic, and the checkpoint flushes it.
func TestMQTTDeadLettersGoToTheDeadLetterSink(t *testing.T) {
	e := newEdgeEnv(t)
	var onTopic atomic.Int64
	require.NoError(t, e.broker.Subscribe("dlq/#", 1, func(*mochi.Client, packets.Subscription, packets.Packet) { onTopic.Add(1) }))
	dead := &deadSink{}
	p := e.pipeline(true, time.Hour)
	src := p.Source.(pipeline.MQTTSource)
	src.DeadLetterTopic = ""
	p.Source, p.DeadLetter = src, pipeline.Use(dead)
	g := e.start(t, p)

	bad := []string{"not json", `{"sensor":"x","ts":1}`}
	for _, b := range bad {
		require.NoError(t, e.broker.Publish("sensors/x", []byte(b), false, 1))
	}
	// A good reading after them: once it is applied, they were handled.
	require.NoError(t, e.broker.Publish("sensors/x", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "x", TS: 2, Value: 1}), false, 1))
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond)
	got, before := dead.outputs()
	require.Len(t, got, len(bad))
	for i, o := range got {
		require.NotNil(t, o.Dead)
		require.Equal(t, bad[i], string(o.Dead.Value))
		require.Equal(t, "sensors/x", o.Topic)
		require.Equal(t, streaming.ShardID("edge-gw-1"), o.Shard)
		require.Equal(t, int64(-1), o.Offset)
		require.Equal(t, streaming.Epoch(1), o.Epoch, "a dead letter carries the shard's epoch")
		require.Error(t, o.Dead.Err)
	}
	require.Eventually(t, func() bool { return g.w.Stats().DeadLettered == uint64(len(bad)) }, waitFor, time.Millisecond, "stats %+v", g.w.Stats())
	require.NoError(t, g.w.Checkpoint(context.Background()))
	_, after := dead.outputs()
	require.Greater(t, after, before, "the checkpoint's pre-commit flushed the dead-letter sink")
	require.Zero(t, onTopic.Load(), "nothing was published to the broker's dead-letter topic")
}

// cutMarkingSink keeps its outputs in memory and records, at each
// MarkCut, the offset and how many outputs it had been written by then.
type cutMarkingSink struct {
	*streaming.MemorySink
	mu    sync.Mutex
	marks [][2]int64 // offset, outputs written before the mark
}

func (c *cutMarkingSink) MarkCut(_ streaming.ShardID, offset int64) {
	c.mu.Lock()
	c.marks = append(c.marks, [2]int64{offset, int64(len(c.Outputs()))})
	c.mu.Unlock()
}

// TestMQTTSinkOfYourOwnIsToldTheCut: a sink of the user's own that marks
// cuts (streaming.SinkCutMarker) is told where an MQTT shard's checkpoint
// cut falls, as on Kafka, with offset -1 (an MQTT message has none).
// Bug: an MQTT shard's cut never called MarkCut, so such a sink never
// learnt which of its outputs a checkpoint holds.
func TestMQTTSinkOfYourOwnIsToldTheCut(t *testing.T) {
	e := newEdgeEnv(t)
	sink := &cutMarkingSink{MemorySink: streaming.NewMemorySink()}
	p := e.pipeline(true, time.Hour)
	p.Sinks = []pipeline.SinkSpec{pipeline.Use(sink)}
	g := e.start(t, p)
	for i := range 5 {
		require.NoError(t, e.broker.Publish("sensors/s", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "s", TS: int64(i), Value: 30}), false, 1))
	}
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == 5 }, waitFor, time.Millisecond)
	written := int64(len(sink.Outputs()))
	require.Positive(t, written)
	require.NoError(t, g.w.Checkpoint(context.Background()))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Equal(t, [][2]int64{{-1, written}}, sink.marks, "one mark, after the five readings' outputs")
}

// TestMQTTShardEpochGrowsPerRun: each run of an MQTT shard owns it at a
// new epoch, one past the restored checkpoint's, so a run still going
// under the same client id after another restored the shard is fenced:
// its checkpoints, the final one included, are refused (streaming.ErrFenced),
// the newer run's are not. The run's outputs carry its epoch (bug: an
// MQTT shard's carried 0, so the outputs of two runs, whose offsets both
// count from 1, looked the same).
func TestMQTTShardEpochGrowsPerRun(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	mem := streaming.NewMemorySink()
	p.Sinks = append(p.Sinks, pipeline.Use(mem))
	g1 := e.start(t, p)
	require.NoError(t, e.broker.Publish("sensors/s", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "s", TS: 1, Value: 1}), false, 1))
	require.Eventually(t, func() bool { return g1.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond)
	require.Equal(t, streaming.Epoch(1), g1.w.Shards()[0].Epoch, "nothing stored: the first epoch")
	require.NotEmpty(t, mem.Outputs())
	for _, o := range mem.Outputs() {
		require.Equal(t, streaming.Epoch(1), o.Epoch, "output %s of the first run", o.Name)
	}
	require.NoError(t, g1.w.Checkpoint(context.Background()))
	require.Equal(t, streaming.Epoch(1), g1.w.Shards()[0].Checkpoint.LastEpoch)

	// A second run of the shard (another worker, the same client id and
	// store) restores that checkpoint at the next epoch.
	g2 := start(t, p, pipeline.WithWorkerID("edge-gw-2"))
	require.Eventually(t, func() bool { return len(g2.w.Shards()) == 1 }, waitFor, time.Millisecond)
	require.Equal(t, streaming.Epoch(2), g2.w.Shards()[0].Epoch)
	require.NoError(t, g2.w.Checkpoint(context.Background()))
	require.Equal(t, streaming.Epoch(2), g2.w.Shards()[0].Checkpoint.LastEpoch)
	requireFenced(t, g1, g2)
}

// requireFenced checks that the older run of a shard is fenced once the
// newer one checkpointed: its checkpoint fails, and so does its final
// checkpoint (after the newer run stopped), with which it stops.
func requireFenced(t *testing.T, older, newer *running) {
	t.Helper()
	require.ErrorIs(t, older.w.Checkpoint(context.Background()), streaming.ErrFenced, "the older run's checkpoint is fenced")
	newer.stop(t)
	older.cancel()
	select {
	case err := <-older.done:
		require.ErrorIs(t, err, streaming.ErrFenced)
		close(older.done)
	case <-time.After(waitFor):
		t.Fatal("the older run did not stop")
	}
}

// Two runs of the shard started at once from the same checkpoint (here:
// none) would both take the epoch after it; with a coordination store
// each claims its own there, so the older run is fenced.
func TestMQTTShardEpochClaimedInCoordination(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	store := newCoordStore(t, 5*time.Second)
	empty := logtest.NewCounter("shard starts empty")
	g1 := start(t, p, pipeline.WithWorkerID("edge-gw-1"), pipeline.WithCoordination(store), pipeline.WithLogger(empty.Logger()))
	require.Eventually(t, func() bool { return len(g1.w.Shards()) == 1 }, waitFor, time.Millisecond)
	require.Equal(t, streaming.Epoch(1), g1.w.Shards()[0].Epoch)
	require.Equal(t, int64(1), empty.Lines(), "nothing stored: the claimed epoch does not turn it into a restore")

	// The second run starts before the first checkpointed anything: it
	// restores the same (empty) state, and still gets a later epoch.
	g2 := start(t, p, pipeline.WithWorkerID("edge-gw-2"), pipeline.WithCoordination(store))
	require.Eventually(t, func() bool { return len(g2.w.Shards()) == 1 }, waitFor, time.Millisecond)
	require.Equal(t, streaming.Epoch(2), g2.w.Shards()[0].Epoch)
	claimed, err := store.Get(context.Background(), coordination.Durable, pipeline.EpochKey(p.Name, "edge-gw-1"))
	require.NoError(t, err)
	require.Equal(t, "2", string(claimed.Value))

	require.NoError(t, g2.w.Checkpoint(context.Background()))
	requireFenced(t, g1, g2)
}

// flakyCoord fails its first updates and creates with a retryable error.
type flakyCoord struct {
	coordination.Store
	fails atomic.Int32
}

func (f *flakyCoord) Create(ctx context.Context, ks coordination.Keyspace, key string, v []byte) (coordination.CasOutcome, error) {
	if f.fails.Add(-1) >= 0 {
		return coordination.Lost, coordination.Retryable("create", ks, key, errors.New("connection reset"))
	}
	return f.Store.Create(ctx, ks, key, v)
}

func (f *flakyCoord) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	if f.fails.Add(-1) >= 0 {
		return coordination.Lost, coordination.Retryable("update", ks, key, errors.New("connection reset"))
	}
	return f.Store.Update(ctx, ks, key, v, rev)
}

// The coordination store's epoch claimer passes the conformance suite
// every durable store's claimer does.
func TestCoordEpochsConformance(t *testing.T) {
	store := newCoordStore(t, 5*time.Second)
	statetest.RunEpochClaimer(t, func(*testing.T) streaming.EpochClaimer { return pipeline.CoordEpochs(store) })
}

// Runs claiming a shard's epoch at once each get their own, every one
// past the restored checkpoint's and past every earlier claim, through
// lost races and retryable store errors.
func TestClaimEpochIsUniqueAndGrows(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	store := &flakyCoord{Store: newCoordStore(t, 5*time.Second)}
	store.fails.Store(3)
	w, err := pipeline.NewWorker(context.Background(), p, pipeline.WithWorkerID("edge-gw-1"), pipeline.WithCoordination(store), pipeline.WithLogger(testLogger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	ctx := context.Background()

	claims := make([]func() (streaming.Epoch, error), 16)
	for i := range claims {
		claims[i] = func() (streaming.Epoch, error) { return pipeline.ClaimEpoch(ctx, w, "s", 4) }
	}
	statetest.RequireClaimsAtOnce(t, 5, claims...)
	// A checkpoint restored past every claim wins over them.
	ep, err := pipeline.ClaimEpoch(ctx, w, "s", 100)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(101), ep)
	// Another shard, another count.
	ep, err = pipeline.ClaimEpoch(ctx, w, "edge/gw 1", 0)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(1), ep)
	// A claimed value that is not a number is an error naming the key.
	_, err = store.Update(ctx, coordination.Durable, pipeline.EpochKey(p.Name, "s"), []byte("x"), mustRev(t, store, pipeline.EpochKey(p.Name, "s")))
	require.NoError(t, err)
	_, err = pipeline.ClaimEpoch(ctx, w, "s", 0)
	require.ErrorContains(t, err, pipeline.EpochKey(p.Name, "s"))
	require.ErrorContains(t, err, "not a number")
}

// s3Durable is a durable store on a fresh S3-compatible server.
func s3Durable(t *testing.T) (pipeline.Durable, *s3test.Server) {
	s3 := s3test.Start(t, "ckpt")
	t.Setenv("EDGE_S3_KEY", s3.AccessKey)
	t.Setenv("EDGE_S3_SECRET", s3.SecretKey)
	return pipeline.Durable{S3: &pipeline.S3Store{Bucket: "ckpt", Prefix: "edge", Endpoint: s3.URL, Region: "us-east-1",
		AccessKeyEnv: "EDGE_S3_KEY", SecretKeyEnv: "EDGE_S3_SECRET"}}, s3
}

// Without a coordination store, the runs of an MQTT shard claim their
// epochs in an S3 durable store: two runs started at once from the same
// checkpoint (here: none) get their own, and the older one is fenced.
func TestMQTTShardEpochClaimedInDurableS3(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	p.State.Durable, _ = s3Durable(t)
	g1 := start(t, p, pipeline.WithWorkerID("edge-gw-1"))
	require.Eventually(t, func() bool { return len(g1.w.Shards()) == 1 }, waitFor, time.Millisecond)
	require.Equal(t, streaming.Epoch(1), g1.w.Shards()[0].Epoch)
	g2 := start(t, p, pipeline.WithWorkerID("edge-gw-2"))
	require.Eventually(t, func() bool { return len(g2.w.Shards()) == 1 }, waitFor, time.Millisecond)
	require.Equal(t, streaming.Epoch(2), g2.w.Shards()[0].Epoch, "the same (empty) checkpoint restored, a later epoch claimed")
	require.NoError(t, g2.w.Checkpoint(context.Background()))
	// The older run's commits are refused by the epoch of the manifest it
	// reads again before each (not a cached one, whose conditional write
	// would then fail as a conflict).
	requireFenced(t, g1, g2)
}

// Workers' runs claiming an MQTT shard's epoch in an S3 durable store at
// once each get their own, past the restored checkpoint's.
func TestClaimEpochInDurableS3(t *testing.T) {
	e := newEdgeEnv(t)
	durable, s3 := s3Durable(t)
	ctx := context.Background()
	workers := make([]*pipeline.Worker, 2)
	for i := range workers {
		p := e.pipeline(false, 0)
		p.State.Durable = durable
		w, err := pipeline.NewWorker(ctx, p, pipeline.WithWorkerID(fmt.Sprintf("edge-gw-%d", i)), pipeline.WithLogger(testLogger(t)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		workers[i] = w
	}
	var claims []func() (streaming.Epoch, error)
	for _, w := range workers {
		for range 8 {
			claims = append(claims, func() (streaming.Epoch, error) { return pipeline.ClaimEpoch(ctx, w, "edge-gw-1", 4) })
		}
	}
	statetest.RequireClaimsAtOnce(t, 5, claims...)

	// With the store unreachable the claim fails, naming the shard and
	// the object.
	s3.Stop()
	_, err := pipeline.ClaimEpoch(ctx, workers[0], "edge-gw-1", 4)
	require.ErrorContains(t, err, "shard edge-gw-1: claim epoch in the durable store")
	require.ErrorContains(t, err, "s3://ckpt/edge/epochs/k-")
}

func mustRev(t testing.TB, s coordination.Store, key string) coordination.Revision {
	t.Helper()
	e, err := s.Get(context.Background(), coordination.Durable, key)
	require.NoError(t, err)
	return e.Revision
}

// With no coordination store, the durable store claims the epochs when
// it can: the worker's own Badger (the default) and an in-memory store
// are the process's, and a second run of the shard started from the same
// checkpoint gets the next epoch. One that claims none (here a files
// store built in Go) gives each run the epoch after the restored one, and
// the worker warns that a second run shares it; a durable folder does not
// warn: its lock keeps one process.
func TestClaimEpochInDurableStore(t *testing.T) {
	e := newEdgeEnv(t)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		durable pipeline.Durable
		epochs  []streaming.Epoch // of two runs from a checkpoint at epoch 4
		warns   int64
	}{
		{"the worker's own Badger", pipeline.Durable{}, []streaming.Epoch{5, 6}, 0},
		{"in-memory store", pipeline.Durable{Store: memory.New()}, []streaming.Epoch{5, 6}, 0},
		{"store built in Go that claims no epochs", pipeline.Durable{Store: filesStore(t)}, []streaming.Epoch{5, 5}, 2},
		{"durable folder", pipeline.Durable{Dir: t.TempDir()}, []streaming.Epoch{5, 5}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e.pipeline(false, 0)
			p.State.Durable = c.durable
			warned := logtest.NewCounter("shard epoch not claimed")
			w, err := pipeline.NewWorker(ctx, p, pipeline.WithWorkerID("edge-gw-1"), pipeline.WithLogger(warned.Logger()))
			require.NoError(t, err)
			t.Cleanup(func() { _ = w.Close() })
			var got []streaming.Epoch
			for range c.epochs {
				ep, err := pipeline.ClaimEpoch(ctx, w, "edge-gw-1", 4)
				require.NoError(t, err)
				got = append(got, ep)
			}
			require.Equal(t, c.epochs, got)
			require.Equal(t, c.warns, warned.Lines())
		})
	}
}

func filesStore(t *testing.T) streaming.StateStore {
	s, err := files.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestMQTTJSONDecoderAppliesANullInputAsNone: with a decoder other than
// the reading decoder (here json), an MQTT record whose input field is
// null or absent is applied with the input None, as a Kafka source
// applies it: the nodes fed by it skip it. Bug: the MQTT source passed
// the graph a float, None became NaN, and the source's limits
// dead-lettered the record ("value NaN is outside ±1e+15").
func TestMQTTJSONDecoderAppliesANullInputAsNone(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	p.Decoder = pipeline.JSONDecoder{Key: "id", Time: "t"}
	mem := streaming.NewMemorySink()
	p.Sinks = []pipeline.SinkSpec{pipeline.Use(mem)}
	g := e.start(t, p)
	for _, m := range []string{`{"id":"s","t":1,"value":21.5}`, `{"id":"s","t":2,"value":null}`, `{"id":"s","t":3}`, `{"id":"s","t":4,"value":22}`} {
		require.NoError(t, e.broker.Publish("sensors/s", []byte(m), false, 1))
	}
	require.Eventually(t, func() bool { st := g.w.Stats(); return st.RecordsIn+st.DeadLettered == 4 }, waitFor, time.Millisecond)
	require.Zero(t, g.w.Stats().DeadLettered, "a record whose input is null or absent is applied, not dead-lettered")
	var values []float64
	var ts []int64
	for _, o := range mem.Outputs() {
		if o.Name == "value" {
			values, ts = append(values, o.Value), append(ts, o.TS)
		}
	}
	require.Equal(t, []float64{21.5, 22}, values, "the raw input is output for the two records that carry one")
	require.Equal(t, []int64{1e6, 4e6}, ts)
}

// TestMQTTReceiveMaximumAboveAQuarterOfTheWindowStarts: a receive_maximum
// the spec accepts (any MQTT value, here 20000) starts the worker and
// applies readings: the dedup window, 4× it, is capped at the cursor's
// largest, instead of failing the worker's start with an error about a
// dedup window the spec never named.
func TestMQTTReceiveMaximumAboveAQuarterOfTheWindowStarts(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	src := p.Source.(pipeline.MQTTSource)
	src.ReceiveMaximum = 20000
	p.Source = src
	mem := streaming.NewMemorySink()
	p.Sinks = []pipeline.SinkSpec{pipeline.Use(mem)}
	require.NoError(t, p.WithDefaults().Validate())
	g := e.start(t, p)
	require.NoError(t, e.broker.Publish("sensors/s", []byte(`{"sensor":"s","ts":1,"value":21.5}`), false, 1))
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond)
}

// TestMQTTRFC3339ReadingInTheTimeUnit: a reading whose ts is an RFC 3339
// string is applied at that time whatever the pipeline's time_unit,
// like one whose ts is a number in that unit.
func TestMQTTRFC3339ReadingInTheTimeUnit(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, unit := range []pipeline.TimeUnit{pipeline.Seconds, pipeline.Milliseconds, pipeline.Microseconds} {
		t.Run(string(unit), func(t *testing.T) {
			e := newEdgeEnv(t)
			p := e.pipeline(false, 0)
			p.TimeUnit = unit
			mem := streaming.NewMemorySink()
			p.Sinks = []pipeline.SinkSpec{pipeline.Use(mem)}
			g := e.start(t, p)
			require.NoError(t, e.broker.Publish("sensors/s", []byte(`{"sensor":"s","ts":"2026-01-01T00:00:00Z","value":1}`), false, 1))
			require.Eventually(t, func() bool { st := g.w.Stats(); return st.RecordsIn+st.DeadLettered == 1 }, waitFor, time.Millisecond)
			require.Zero(t, g.w.Stats().DeadLettered)
			var ts []int64
			for _, o := range mem.Outputs() {
				if o.Name == "value" {
					ts = append(ts, o.TS)
				}
			}
			require.Equal(t, []int64{at.UnixNano()}, ts)
		})
	}
}

// TestMQTTDecoderOfYourOwnReadsTheTopic: a decoder of your own reads the
// topic a message came on from Message.Topic, as it does from a Kafka
// source (a sensor id in the topic's last level and a bare number as the
// payload, say). Bug: an MQTT source handed it an empty Topic.
func TestMQTTDecoderOfYourOwnReadsTheTopic(t *testing.T) {
	e := newEdgeEnv(t)
	rec := newRecorder()
	var topics sync.Map
	p := e.pipeline(true, time.Hour)
	p.Decoder = pipeline.DecoderFunc(func(m pipeline.Message, r *pipeline.Record) error {
		topics.Store(m.Topic, true)
		i := strings.LastIndexByte(m.Topic, '/')
		if i < 0 {
			return fmt.Errorf("topic %q has no sensor level", m.Topic)
		}
		v, err := strconv.ParseFloat(string(m.Value), 64)
		if err != nil {
			return err
		}
		r.Key, r.TS, r.Inputs[0] = []byte(m.Topic[i+1:]), 1, streaming.Float(v)
		return nil
	})
	p.Graph = pipeline.Graph{Inputs: []pipeline.Input{{Name: "value"}}, Outputs: []string{"peak"},
		Nodes: []pipeline.Node{{Name: "peak", Type: "rolling_max", Params: map[string]any{"window": 2, "warmup": "partial"}, Inputs: []string{"value"}}}}
	p.Sinks = []pipeline.SinkSpec{rec.shared()}
	g := e.start(t, p)

	require.NoError(t, e.broker.Publish("sensors/s-7", []byte("21.5"), false, 1))
	require.Eventually(t, func() bool { st := g.w.Stats(); return st.RecordsIn+st.DeadLettered == 1 }, waitFor, time.Millisecond)
	_, sawTopic := topics.Load("sensors/s-7")
	require.True(t, sawTopic, "the decoder was handed the message's topic")
	require.Equal(t, uint64(1), g.w.Stats().RecordsIn, "decoded, not dead-lettered")
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for k, v := range rec.outs {
			if k.key == "s-7" && k.name == "peak" && v.value == 21.5 {
				return true
			}
		}
		return false
	}, waitFor, time.Millisecond, "the reading reached the sink under the topic's sensor")
}

// TestMQTTPasswordVariableUnsetIsRefused: a source.mqtt.password_env
// naming a variable that is unset or empty connected with an empty
// password: a broker with authentication refused it as bad credentials,
// naming the user but not the variable, and one without let the worker
// run on no credentials at all. The worker refuses to start, naming the
// key and the variable.
func TestMQTTPasswordVariableUnsetIsRefused(t *testing.T) {
	e := newEdgeEnv(t)
	p := e.pipeline(false, 0)
	src := p.Source.(pipeline.MQTTSource)
	src.Username, src.PasswordEnv = "edge", "TFLO_TEST_MQTT_PASSWORD"
	p.Source = src
	p.Sinks = []pipeline.SinkSpec{pipeline.Use(streaming.NewMemorySink())}
	t.Setenv("TFLO_TEST_MQTT_PASSWORD", "")
	w, err := pipeline.NewWorker(t.Context(), p, pipeline.WithWorkerID("edge-gw-1"))
	if err == nil {
		_ = w.Close()
	}
	require.ErrorContains(t, err, `source.mqtt.password_env names TFLO_TEST_MQTT_PASSWORD (the password of user "edge"), which is unset or empty`)

	t.Setenv("TFLO_TEST_MQTT_PASSWORD", "pw")
	// A new sink: the refused worker closed the first. The broker
	// allows every client.
	p.Sinks = []pipeline.SinkSpec{pipeline.Use(streaming.NewMemorySink())}
	g := e.start(t, p)
	require.NoError(t, e.broker.Publish("sensors/s", []byte(`{"sensor":"s","ts":1,"value":21.5}`), false, 1))
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == 1 }, waitFor, time.Millisecond)
}

// TestEvaluateDecodesAsTheMQTTSource: Evaluate of an MQTT pipeline
// decoded as the Kafka reading decoder does, so it refused an RFC 3339
// ts the MQTT source accepts and accepted a reading whose sensor is not
// its topic's last level, which the source dead-letters
// (require_topic_match).
func TestEvaluateDecodesAsTheMQTTSource(t *testing.T) {
	msgs := []pipeline.Message{
		{Topic: "sensors/s-1", Value: []byte(`{"sensor":"s-1","ts":"2026-01-01T00:00:00Z","value":1}`)},
		{Topic: "sensors/s-2", Value: []byte(`{"sensor":"s-1","ts":1767225601000,"value":2}`)},
	}
	for _, c := range []struct {
		name              string
		match             *bool
		records, rejected int
	}{
		{"require_topic_match by default", nil, 1, 1},
		{"require_topic_match false", new(bool), 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := pipeline.Pipeline{
				Name:   "eval",
				Source: pipeline.MQTTSource{Servers: []string{"mqtt://localhost:1883"}, Topics: []string{"sensors/+"}, DeadLetterTopic: "sensors.dlq", RequireTopicMatch: c.match},
				Graph: pipeline.Graph{
					Inputs: []pipeline.Input{{Name: "value"}},
					Nodes:  []pipeline.Node{{Name: "sma", Type: "sma", Inputs: []string{"value"}, Params: map[string]any{"window": 1}}},
				},
			}
			out := streaming.NewMemorySink()
			st, err := pipeline.Evaluate(context.Background(), p, func(yield func(pipeline.Message) bool) {
				for _, m := range msgs {
					if !yield(m) {
						return
					}
				}
			}, out)
			require.NoError(t, err)
			require.Equal(t, c.records, st.Records, "last reason: %v", st.LastReason)
			require.Equal(t, c.rejected, st.Rejected)
			if c.rejected > 0 {
				require.ErrorIs(t, st.LastReason, mqtt.ErrTopicMismatch)
			}
			outs := out.Outputs()
			require.NotEmpty(t, outs)
			require.Equal(t, "s-1", outs[0].Key)
			require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), outs[0].TS, "the RFC 3339 ts, in the pipeline's unit")
		})
	}
}
