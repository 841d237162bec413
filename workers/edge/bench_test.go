package edge

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, map[string]func(*testing.B){"mqtt-receive": benchBareReceive})
}

// completions frees one publishing slot per completed QoS 2 flow to a
// subscriber, so at most cap(slots) flows are outstanding at the broker
// (the sources omit Receive Maximum, which keeps mochi v2.7.9 out of its
// flow-control path: it can deadlock there).
type completions struct {
	mochi.HookBase
	slots chan struct{}
}

func (h *completions) ID() string                                  { return "bench-completions" }
func (h *completions) Provides(b byte) bool                        { return b == mochi.OnQosComplete }
func (h *completions) OnQosComplete(*mochi.Client, packets.Packet) { <-h.slots }

// benchPayloads: 100 sensors whose values swing across the 20/25
// thresholds, so the graph raises and clears alarms as it would in the
// field (a signal about every 8 readings of a sensor).
func benchPayloads() [][]byte {
	out := make([][]byte, 4000)
	for i := range out {
		sensor, k := i%100, i/100
		v := 22.5 + 6*math.Sin(float64(k)*math.Pi/4+float64(sensor))
		out[i] = mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "sensor-" + strconv.Itoa(sensor), TS: int64(k) * 1000, Value: v})
	}
	return out
}

// benchFlow publishes b.N readings through an in-process broker to
// whatever start runs; handled must be called once per reading handled.
func benchFlow(b *testing.B, start func(ctx context.Context, url string, handled func()) (wait func())) {
	srv := mochi.New(&mochi.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hook := &completions{slots: make(chan struct{}, 256)}
	for _, h := range []mochi.Hook{new(auth.AllowHook), hook} {
		if err := srv.AddHook(h, nil); err != nil {
			b.Fatal(err)
		}
	}
	tcp := listeners.NewTCP(listeners.Config{ID: "tcp", Address: "127.0.0.1:0"})
	if err := srv.AddListener(tcp); err != nil {
		b.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		b.Fatal(err)
	}
	defer srv.Close()

	var n atomic.Int64
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	wait := start(ctx, "mqtt://"+tcp.Address(), func() {
		if n.Add(1) == int64(b.N) {
			close(done)
		}
	})
	defer func() { cancel(); wait() }()
	deadline := time.Now().Add(waitFor)
	for len(srv.Topics.Subscribers("sensors/s").Subscriptions) == 0 {
		if time.Now().After(deadline) {
			b.Fatal("source never subscribed")
		}
		time.Sleep(time.Millisecond) // benchmark setup, not a test assertion
	}
	payloads := benchPayloads()
	stuck := time.NewTimer(time.Hour)
	b.ResetTimer()
	for i := range b.N {
		stuck.Reset(waitFor)
		select {
		case hook.slots <- struct{}{}:
		case <-stuck.C:
			b.Fatalf("stuck after %d of %d readings", n.Load(), i)
		}
		if err := srv.Publish("sensors/s", payloads[i%len(payloads)], false, 2); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(waitFor):
		b.Fatalf("stuck: %d of %d readings handled", n.Load(), b.N)
	}
	b.StopTimer()
}

func newBenchSource(b *testing.B, url string) *mqtt.Source {
	s, err := mqtt.NewSource(mqtt.WithServers(url), mqtt.WithClientID("bench"), mqtt.WithTopics("sensors/#"), mqtt.WithReceiveMaximum(0)) // mochi v2.7.9 flow-control deadlock: see connectors/mqtt
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchBareReceive is the baseline: broker → mqtt.Source → no-op handler.
func benchBareReceive(b *testing.B) {
	benchFlow(b, func(ctx context.Context, url string, handled func()) func() {
		s := newBenchSource(b, url)
		errc := make(chan error, 1)
		go func() {
			errc <- s.Run(ctx, func(context.Context, mqtt.Message) error { handled(); return nil })
		}()
		return func() { <-errc }
	})
}

// BenchmarkEdgePipeline is MQTT → per-sensor edge graph → Kafka publish
// (kfake, flushed at the end), beside the bare MQTT receive of the same
// readings (x-mqtt-receive).
func BenchmarkEdgePipeline(b *testing.B) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, signalsTopic))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	pub, err := kafka.NewPublisher(context.Background(), kafka.PublishTo(signalsTopic, kc.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	var p *Pipeline
	benchFlow(b, func(ctx context.Context, url string, handled func()) func() {
		store := memory.New()
		p, err = New(newBenchSource(b, url), KafkaSink(pub, 1), store, store, WithSMA(3), WithThresholds(20, 25), WithCheckpointInterval(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		p.afterHandle = handled
		errc := make(chan error, 1)
		go func() { errc <- p.Run(ctx) }()
		return func() { <-errc }
	})
	b.StartTimer()
	if err := pub.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	st := p.Stats()
	b.ReportMetric(float64(st.Signals)/float64(b.N), "signals/reading")
	benchratio.Report(b, "mqtt-receive", benchBareReceive)
}
