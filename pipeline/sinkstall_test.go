package pipeline_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
)

// TestStopWhileOutputBrokerStalls: the output topic's cluster stops
// answering produce requests, so the Kafka sink's buffer fills and the
// shards block writing their outputs. A stop must still end the
// partitions (their final checkpoints refused: their outputs are not all
// written), and a later worker replays the records, so the output topic
// ends up with every output of a reference run. Bug: the sink wrote with
// a context that never ended, so the revoke waited for the broker.
func TestStopWhileOutputBrokerStalls(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	out, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "readings.mean"))
	require.NoError(t, err)
	t.Cleanup(out.Close)
	release := make(chan struct{})
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstall)
	var stalled atomic.Int32
	out.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		out.KeepControl()
		stalled.Add(1)
		out.SleepControl(func() { <-release })
		return nil, nil, false
	})

	p := alarmPipeline(addrs, t.TempDir(), pipeline.KafkaSink{Brokers: out.ListenAddrs(), Topic: "readings.mean", MaxBuffered: 8})
	p.Graph.Nodes, p.Graph.Outputs = p.Graph.Nodes[:1], []string{"mean"}
	p.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 10 * time.Second, RevokeTimeout: 3 * time.Second}
	rs := makeReadings(16, 1, 40)
	want := reference(t, p, rs)
	produce(t, addrs, rs)

	a := start(t, p, pipeline.WithWorkerID("a"))
	a.waitFor(t, func() bool { return stalled.Load() > 0 }, 30*time.Second, "the sink never produced")
	a.cancel()
	a.waitFor(t, func() bool { return a.w.Stats().Owned == 0 }, 20*time.Second, "the partitions were not released while the sink waited for the broker")
	require.Less(t, a.w.Stats().RecordsIn, uint64(len(rs)), "the sink's buffer never filled")
	unstall()
	select {
	case err := <-a.done:
		t.Logf("worker a stopped: %v", err)
		close(a.done)
	case <-time.After(60 * time.Second):
		t.Fatal("worker a did not stop")
	}

	b := start(t, p, pipeline.WithWorkerID("b"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(out.ListenAddrs()...), kgo.ConsumeTopics("readings.mean"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	got := map[outKey]outVal{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	covered := func() bool {
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				return false
			}
		}
		return true
	}
	for !covered() {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "the output topic lacks outputs of the reference run (%d of %d distinct; worker b %+v)", len(got), len(want), b.w.Stats())
		fs.EachRecord(func(r *kgo.Record) {
			var o struct {
				Key, Name string
				TS        int64
				Value     float64
			}
			require.NoError(t, json.Unmarshal(r.Value, &o))
			k := outKey{o.Key, o.Name, o.TS * int64(time.Millisecond)}
			v := outVal{value: o.Value}
			if prev, ok := got[k]; ok {
				require.Equal(t, prev, v, "output %+v written twice with different values", k)
			}
			got[k] = v
		})
	}
	require.Len(t, got, len(want), "outputs the reference run does not have")
}

// TestMQTTStopWhileOutputBrokerStalls: the MQTT source's shard blocks
// writing outputs to a Kafka cluster that stopped answering. A stop ends
// the source anyway; the shard takes no final checkpoint (a reading's
// outputs are not all written, and its message is not acknowledged), and
// the next run, once the cluster answers, applies every reading the
// broker delivers again. Bug: the handler wrote with a context that
// never ended, so the stop waited for the cluster.
func TestMQTTStopWhileOutputBrokerStalls(t *testing.T) {
	e := newEdgeEnv(t)
	release := make(chan struct{})
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstall)
	var stalled atomic.Int32
	e.kafka.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		stalled.Add(1)
		e.kafka.SleepControl(func() { <-release })
		return nil, nil, false
	})
	p := e.pipeline(true, 0)
	// Room for one record: the first reading's output is sent and stalls,
	// the second reading's waits for room.
	p.Sinks = []pipeline.SinkSpec{pipeline.KafkaSink{Brokers: e.kafka.ListenAddrs(), Topic: signalsTopic, MaxBuffered: 1}}
	p.Graph.Outputs = []string{"value"}
	const n = 10
	reg := prometheus.NewRegistry()
	g1 := start(t, p, pipeline.WithWorkerID("edge-gw-1"), pipeline.WithMetrics(reg))
	require.Eventually(t, func() bool { return g1.w.Stats().Subscribed }, waitFor, time.Millisecond)
	for ts := range int64(n) {
		require.NoError(t, e.broker.Publish("sensors/boiler", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "boiler", TS: ts + 1, Value: float64(ts)}), false, 2))
	}
	g1.waitFor(t, func() bool {
		return stalled.Load() > 0 && gatherWith(t, reg, "tflo_mqtt_source_events_total", "counter", "received") >= 2
	}, waitFor, "the sink never produced, or the second reading never came")
	g1.cancel()
	g1.waitFor(t, func() bool { return g1.w.Stats().Owned == 0 }, 20*time.Second, "the source did not stop while the sink waited for the broker")
	require.Less(t, g1.w.Stats().RecordsIn, uint64(n), "the sink's buffer never filled")
	unstall() // the sinks' close waits for what they buffered
	select {
	case err := <-g1.done:
		require.ErrorContains(t, err, "failed part-way", "the final checkpoint is refused")
		close(g1.done)
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop")
	}

	g2 := e.start(t, p)
	require.Eventually(t, func() bool { return g2.w.Stats().RecordsIn == n }, waitFor, time.Millisecond,
		"the broker delivers every unacknowledged reading again")
	require.NoError(t, g2.w.Checkpoint(context.Background()))
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.ListenAddrs()...), kgo.ConsumeTopics(signalsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	got := map[int64]float64{}
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "outputs of %d of %d readings", len(got), n)
		fs.EachRecord(func(r *kgo.Record) {
			var o struct {
				TS    int64
				Value float64
			}
			require.NoError(t, json.Unmarshal(r.Value, &o))
			got[o.TS] = o.Value
		})
	}
	for ts := range int64(n) {
		require.Equal(t, float64(ts), got[ts+1], "output of the reading at %d", ts+1)
	}
}
