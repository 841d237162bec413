package edge

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

const waitFor = 15 * time.Second

const signalsTopic = "edge.signals"

type env struct {
	broker *mochi.Server
	addr   string
	kafka  *kfake.Cluster
	store  *memory.Store
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := mochi.New(&mochi.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, srv.AddHook(new(auth.AllowHook), nil))
	tcp := listeners.NewTCP(listeners.Config{ID: "tcp", Address: "127.0.0.1:0"})
	require.NoError(t, srv.AddListener(tcp))
	require.NoError(t, srv.Serve())
	t.Cleanup(func() { _ = srv.Close() })
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, signalsTopic))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	return &env{broker: srv, addr: tcp.Address(), kafka: kc, store: memory.New()}
}

// gateway is one run of the edge pipeline: a fresh source, publisher and
// pipeline over the env's broker, cluster and store.
type gateway struct {
	p      *Pipeline
	src    *mqtt.Source
	pub    *kafka.Publisher
	cancel context.CancelFunc
	done   chan error
}

func startGateway(t testing.TB, e *env, srcOpts []mqtt.Option, opts ...Option) *gateway {
	t.Helper()
	src, err := mqtt.NewSource(append([]mqtt.Option{mqtt.WithServers("mqtt://" + e.addr), mqtt.WithClientID("edge-gw-1"),
		mqtt.WithTopics("sensors/#"), mqtt.WithBackoff(20*time.Millisecond, 200*time.Millisecond),
		mqtt.WithReceiveMaximum(0)}, srcOpts...)...) // mochi v2.7.9 flow-control deadlock: see connectors/mqtt
	require.NoError(t, err)
	pub, err := kafka.NewPublisher(context.Background(), kafka.PublishTo(signalsTopic, e.kafka.ListenAddrs()...))
	require.NoError(t, err)
	base := []Option{WithSMA(3), WithThresholds(20, 25), WithCheckpointInterval(0), WithShard("edge/gw-1")}
	p, err := New(src, KafkaSink(pub, 1), e.store, e.store, append(base, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{p: p, src: src, pub: pub, cancel: cancel, done: make(chan error, 1)}
	go func() { g.done <- p.Run(ctx) }()
	t.Cleanup(func() { g.stop(t); pub.Close() })
	require.Eventually(t, func() bool { return src.Stats().Subscribes > 0 }, waitFor, time.Millisecond)
	return g
}

func (g *gateway) stop(t testing.TB) error {
	t.Helper()
	g.cancel()
	select {
	case err, ok := <-g.done:
		if ok {
			close(g.done)
		}
		return err
	case <-time.After(waitFor):
		t.Fatal("pipeline did not stop")
		return nil
	}
}

type rd struct {
	sensor string
	ts     int64
	v      float64
}

// expectSignals is an independent reference of the edge graph: SMA of 3,
// hysteresis rising at >= 25 and falling at <= 20, a signal on every
// change of mode after the first smoothed value.
func expectSignals(rs []rd) map[string][]Mode {
	type st struct {
		win   []float64
		known bool
		high  bool
	}
	s := map[string]*st{}
	out := map[string][]Mode{}
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
			m := Cleared
			if high {
				m = Raised
			}
			out[r.sensor] = append(out[r.sensor], m)
		}
		x.known, x.high = true, high
	}
	return out
}

// consumeSignals reads n signals from the topic.
func consumeSignals(t testing.TB, e *env, n int) []kgoRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.ListenAddrs()...), kgo.ConsumeTopics(signalsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []kgoRecord
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d signals", len(out), n)
		fs.EachRecord(func(r *kgo.Record) {
			sig, _, err := kafka.DecodeSignal[Mode, Payload](r.Value)
			require.NoError(t, err)
			out = append(out, kgoRecord{key: string(r.Key), partition: r.Partition, sig: sig})
		})
	}
	return out
}

type kgoRecord struct {
	key       string
	partition int32
	sig       Signal
}

func TestEdgeEndToEndWithCheckpointRestoreAndRedelivery(t *testing.T) {
	e := newEnv(t)
	g1 := startGateway(t, e, nil)
	cl, ok := e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)

	// Readings are injected as QoS 2 PUBLISHes with known packet ids so the
	// test can redeliver one later.
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

	// Phase 1: two sensors; boiler rises, attic stays cool.
	phase1 := []rd{
		{"boiler", 1, 19}, {"attic", 1, 10}, {"boiler", 2, 21}, {"boiler", 3, 23},
		{"boiler", 4, 30}, {"boiler", 5, 31}, {"attic", 2, 11}, {"attic", 3, 12},
		{"boiler", 6, 29}, {"boiler", 7, 12},
	}
	// Phase 2 continues the same windows across the restart.
	phase2 := []rd{
		{"boiler", 8, 11}, {"boiler", 9, 10}, {"attic", 4, 40}, {"attic", 5, 41},
		{"attic", 6, 42}, {"boiler", 10, 30}, {"boiler", 11, 30}, {"boiler", 12, 30},
	}
	id := uint16(100)
	for _, r := range phase1 {
		id++
		inject(id, r, false)
	}
	require.Eventually(t, func() bool { return g1.p.Stats().Readings == uint64(len(phase1)) }, waitFor, time.Millisecond)
	res, err := g1.p.Checkpoint(context.Background())
	require.NoError(t, err)
	assert.Positive(t, res.Pieces)

	// Stop the gateway (a clean stop checkpoints again) and start a new
	// one on the same store: it restores the sensors' graphs and cursor.
	require.NoError(t, g1.stop(t))
	g2 := startGateway(t, e, nil)
	cl, ok = e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)

	// The broker redelivers a message the checkpoint already contains.
	last := injected[len(injected)-1]
	inject(last.PacketID, rd{"boiler", 7, 12}, true)
	for _, r := range phase2 {
		id++
		inject(id, r, false)
	}
	require.Eventually(t, func() bool { return g2.p.Stats().Readings == uint64(len(phase2)) }, waitFor, time.Millisecond)
	assert.Equal(t, uint64(1), g2.p.Stats().Source.Duplicates, "the redelivery was dropped by the restored window")

	want := expectSignals(append(append([]rd{}, phase1...), phase2...))
	total := 0
	for _, ms := range want {
		total += len(ms)
	}
	require.Positive(t, total)
	got := consumeSignals(t, e, total)
	bySensor := map[string][]Mode{}
	partitionOf := map[string]int32{}
	var mu sync.Mutex
	mu.Lock()
	defer mu.Unlock()
	for _, r := range got {
		assert.Equal(t, r.sig.Key, r.key, "record key is the sensor id")
		if p, seen := partitionOf[r.key]; seen {
			assert.Equal(t, p, r.partition, "one sensor, one partition")
		}
		partitionOf[r.key] = r.partition
		bySensor[r.key] = append(bySensor[r.key], r.sig.Mode)
		assert.Equal(t, "sensors/"+r.key, r.sig.Payload.Topic)
	}
	assert.Equal(t, want, bySensor)
}

// TestCrashBetweenCheckpointsAppliesEveryReadingOnce runs the gateway with
// acknowledgements deferred to checkpoints, crashes it (no final
// checkpoint, no acks) after readings it handled but did not checkpoint,
// and starts a new one on the same store and session: the broker
// redelivers the unacknowledged readings, the restored state lacks them,
// so each is applied once — the signals (deduplicated by sensor, ts and
// mode, since outputs are at least once) equal an uninterrupted run.
func TestCrashBetweenCheckpointsAppliesEveryReadingOnce(t *testing.T) {
	e := newEnv(t)
	deferAcks := []mqtt.Option{mqtt.WithAckOnCheckpoint()}
	g1 := startGateway(t, e, deferAcks)
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
	require.Eventually(t, func() bool { return g1.p.Stats().Readings == uint64(len(phase1)) }, waitFor, time.Millisecond)
	_, err := g1.p.Checkpoint(context.Background())
	require.NoError(t, err)
	publish(phase2)
	require.Eventually(t, func() bool { return g1.p.Stats().Readings == uint64(len(phase1)+len(phase2)) }, waitFor, time.Millisecond)
	// Phase 1's QoS 2 flows complete (acknowledged at the checkpoint);
	// phase 2's stay open at the broker, awaiting a checkpoint.
	cl, ok := e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)
	require.Eventually(t, func() bool { return cl.State.Inflight.Len() == len(phase2) }, waitFor, time.Millisecond)
	g1.p.skipFinalCheckpoint = true // crash: phase 2 is handled but neither checkpointed nor acknowledged
	require.NoError(t, g1.stop(t))

	g2 := startGateway(t, e, deferAcks)
	require.Eventually(t, func() bool { return g2.p.Stats().Readings == uint64(len(phase2)) }, waitFor, time.Millisecond,
		"the broker redelivers the unacknowledged phase 2")
	publish(phase3)
	require.Eventually(t, func() bool { return g2.p.Stats().Readings == uint64(len(phase2)+len(phase3)) }, waitFor, time.Millisecond)
	require.NoError(t, g2.pub.Flush(context.Background()))

	want := expectSignals(append(append(append([]rd{}, phase1...), phase2...), phase3...))
	total := 0
	for _, ms := range want {
		total += len(ms)
	}
	got := consumeSignals(t, e, total)
	type sigKey struct {
		key  string
		ts   int64
		mode Mode
	}
	seen := map[sigKey]bool{}
	bySensor := map[string][]Mode{}
	for _, r := range got {
		k := sigKey{r.key, r.sig.TS, r.sig.Mode}
		if !seen[k] {
			seen[k] = true
			bySensor[r.key] = append(bySensor[r.key], r.sig.Mode)
		}
	}
	assert.Equal(t, want, bySensor)

	// The state itself: boiler's smoothing window holds exactly its last
	// three readings (10, 11, 12 → 11), each applied once.
	var smooth float64
	require.NoError(t, g2.src.Cut(func([]byte) error {
		in, ok := g2.p.keyed.Lookup("boiler")
		require.True(t, ok)
		v, _ := in.Value("smooth")
		smooth = v.Float64()
		return nil
	}))
	assert.InDelta(t, 11.0, smooth, 1e-9)
}

func TestCheckpointTimerCheckpointsWhileRunning(t *testing.T) {
	e := newEnv(t)
	g := startGateway(t, e, []mqtt.Option{mqtt.WithAckOnCheckpoint()}, WithCheckpointInterval(20*time.Millisecond))
	for i := range 5 {
		payload := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "s", TS: int64(i), Value: 1})
		require.NoError(t, e.broker.Publish("sensors/s", payload, false, 2))
	}
	// The timer's checkpoints acknowledge the readings: the broker's
	// flows for them complete without any explicit Checkpoint call.
	cl, ok := e.broker.Clients.Get("edge-gw-1")
	require.True(t, ok)
	require.Eventually(t, func() bool {
		return g.p.Stats().Readings == 5 && cl.State.Inflight.Len() == 0
	}, waitFor, time.Millisecond)
	st := g.p.Stats().Checkpoint
	assert.NotZero(t, st.LastID, "status after timer checkpoints: %+v", st)
}
