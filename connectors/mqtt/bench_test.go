package mqtt

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// benchPayloads are readings of 100 sensors in the JSON wire form.
func benchPayloads() [][]byte {
	out := make([][]byte, 1000)
	for i := range out {
		out[i] = EncodeReading(nil, Reading{Sensor: "sensor-" + strconv.Itoa(i%100), TS: 1767225600000 + int64(i), Value: 20 + float64(i%17)/3})
	}
	return out
}

// benchTopics[i] is the topic of sensor-i: the sensor id is its last
// level (WithRequireTopicMatch).
var benchTopics = func() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = "sensors/sensor-" + strconv.Itoa(i)
	}
	return out
}()

// completions is a broker hook that frees one publishing slot each time
// a QoS 2 flow to a subscriber completes (PUBCOMP received).
type completions struct {
	mochi.HookBase
	slots chan struct{}
}

func (h *completions) ID() string { return "bench-completions" }

func (h *completions) Provides(b byte) bool { return b == mochi.OnQosComplete }

func (h *completions) OnQosComplete(*mochi.Client, packets.Packet) { <-h.slots }

// benchReceive publishes b.N QoS 2 readings through an in-process broker
// to a Source whose handler is h, keeping at most 256 QoS 2 flows
// outstanding at the broker. The source omits Receive Maximum, which keeps
// mochi out of its flow-control path (see mochiDeadlockNote).
func benchReceive(b *testing.B, h Handler) {
	br := startBroker(b, mqttbroker.Options{})
	hook := &completions{slots: make(chan struct{}, 256)}
	if err := br.srv.AddHook(hook, nil); err != nil {
		b.Fatal(err)
	}
	s, err := NewSource(WithServers(br.url()), WithClientID("bench"), WithTopics("sensors/#"), WithReceiveMaximum(0)) // see mochiDeadlockNote
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	r := runSource(b, s, func(ctx context.Context, m Message) error {
		if err := h(ctx, m); err != nil {
			return err
		}
		if handled.Add(1) == int64(b.N) {
			close(done)
		}
		return nil
	})
	waitSubscribed(b, s, 1)
	payloads := benchPayloads()
	stuck := time.NewTimer(time.Hour)
	b.ResetTimer()
	for i := range b.N {
		stuck.Reset(waitFor)
		select {
		case hook.slots <- struct{}{}:
		case <-stuck.C:
			b.Fatalf("stuck after %d of %d messages: %+v", handled.Load(), i, s.Stats())
		}
		if err := br.srv.Publish(benchTopics[i%100], payloads[i%len(payloads)], false, 2); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(waitFor):
		b.Fatalf("stuck: handled %d of %d", handled.Load(), b.N)
	}
	b.StopTimer()
	_ = r.stop(b)
}

func bareReceive(b *testing.B) { benchReceive(b, func(context.Context, Message) error { return nil }) }

// BenchmarkReceive is the bare MQTT hop: broker → source → no-op handler.
func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkDecodeReading":         {"mqtt-receive": bareReceive},
		"BenchmarkDecodeBinaryCandidate": {"mqtt-receive": bareReceive},
	})
}

func BenchmarkReceive(b *testing.B) {
	bareReceive(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkDecodeReading is the per-reading JSON decode cost, reported
// beside the bare MQTT hop per message (x-mqtt-receive: the share of the
// hop that decoding would add if it were not already inside it).
func BenchmarkDecodeReading(b *testing.B) {
	payloads := benchPayloads()
	b.ReportAllocs()
	var sink float64
	for i := 0; b.Loop(); i++ {
		r, err := DecodeReading(payloads[i%len(payloads)])
		if err != nil {
			b.Fatal(err)
		}
		sink += r.Value
	}
	_ = sink
	benchratio.Report(b, "mqtt-receive", bareReceive)
}

// BenchmarkDecodeBinaryCandidate measures what a compact binary reading
// (uvarint len | sensor | varint ts | float64 bits) would cost to decode,
// to judge whether offering one pays (see the package doc).
func BenchmarkDecodeBinaryCandidate(b *testing.B) {
	var payloads [][]byte
	for _, p := range benchPayloads() {
		r, _ := DecodeReading(p)
		e := binary.AppendUvarint(nil, uint64(len(r.Sensor)))
		e = append(e, r.Sensor...)
		e = binary.AppendVarint(e, r.TS)
		e = binary.LittleEndian.AppendUint64(e, math.Float64bits(r.Value))
		payloads = append(payloads, e)
	}
	b.ReportAllocs()
	var sink float64
	for i := 0; b.Loop(); i++ {
		p := payloads[i%len(payloads)]
		n, k := binary.Uvarint(p)
		if k <= 0 || int(n) > len(p)-k {
			b.Fatal("bad")
		}
		r := Reading{Sensor: string(p[k : k+int(n)])}
		p = p[k+int(n):]
		ts, k := binary.Varint(p)
		r.TS = ts
		r.Value = math.Float64frombits(binary.LittleEndian.Uint64(p[k:]))
		sink += r.Value
	}
	_ = sink
	benchratio.Report(b, "mqtt-receive", bareReceive)
}
