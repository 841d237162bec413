package mqtt

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// TestFloodOfDistinctPacketIDsKeepsMemoryFlat drives one million distinct
// QoS 2 messages (every packet id, many times over, with distinct
// payloads, over 10,000 topics) through the source's message path — the
// same function the connection's router calls — and checks that the
// dedup window and the topic map stay at their capacities and the heap
// does not grow with the number of messages.
func TestFloodOfDistinctPacketIDsKeepsMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("1M messages")
	}
	const (
		n         = 1_000_000
		windowCap = 1024
		topicCap  = 512
	)
	s, err := NewSource(WithServers("mqtt://127.0.0.1:1"), WithClientID("flood"), WithTopics("sensors/#"),
		WithDedupCapacity(windowCap, topicCap), WithReceiveMaximum(256))
	require.NoError(t, err)
	ctx := context.Background()
	var handled int
	h := func(context.Context, Message) error { handled++; return nil }

	topics := make([]string, 10_000)
	sensors := make([]string, len(topics))
	for i := range topics {
		sensors[i] = strconv.Itoa(i)
		topics[i] = "sensors/" + sensors[i]
	}
	payload := make([]byte, 0, 64)
	pub := &paho.Publish{QoS: 2}
	send := func(i int) {
		pub.PacketID = uint16(i%65535) + 1
		pub.Topic = topics[i%len(topics)]
		payload = EncodeReading(payload[:0], Reading{Sensor: sensors[i%len(topics)], TS: int64(i), Value: 1})
		pub.Payload = payload
		if err := s.handle(ctx, nil, pub, h); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	const warm = 100_000
	for i := range warm {
		send(i)
	}
	before := heap()
	maxWindow, maxTopics := 0, 0
	for i := warm; i < n; i++ {
		send(i)
		if i%10_000 == 0 {
			st := s.Stats()
			maxWindow, maxTopics = max(maxWindow, st.WindowLen), max(maxTopics, st.RetainedLen)
		}
	}
	after := heap()

	st := s.Stats()
	assert.Equal(t, n, handled, "every distinct message is processed")
	assert.Equal(t, uint64(0), st.Duplicates)
	assert.Equal(t, windowCap, st.WindowLen)
	assert.LessOrEqual(t, maxWindow, windowCap)
	assert.Equal(t, topicCap, st.RetainedLen)
	assert.LessOrEqual(t, maxTopics, topicCap)
	growth := int64(after) - int64(before)
	t.Logf("heap after %d messages: %d KiB, after %d: %d KiB (growth %d KiB)", warm, before>>10, n, after>>10, growth>>10)
	assert.Less(t, growth, int64(2<<20), "heap grew by %d bytes over %d messages", growth, n-warm)

	// The window still catches a redelivery of a recent message...
	send(n - 1)
	assert.Equal(t, uint64(1), s.Stats().Duplicates)
	// ...and, as documented, forgets one older than its capacity.
	send(n - windowCap - 1)
	assert.Equal(t, uint64(1), s.Stats().Duplicates)
	assert.Equal(t, n+1, handled)
}

// TestFloodThroughTheBrokerKeepsCursorBounded sends 20,000 distinct QoS 2
// messages over 500 topics through the broker: every one is processed,
// and the window and topic map end at, never above, their capacities.
func TestFloodThroughTheBrokerKeepsCursorBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("20k messages through the broker")
	}
	const n, windowCap, topicCap = 20_000, 1024, 64
	b := startBroker(t, mqttbroker.Options{})
	hook := &completions{slots: make(chan struct{}, 256)}
	require.NoError(t, b.srv.AddHook(hook, nil))
	s := newTestSource(t, b, "edge-flood", WithDedupCapacity(windowCap, topicCap))
	var handled int
	maxWindow := 0
	runSource(t, s, func(context.Context, Message) error {
		handled++ // one handler goroutine
		if handled%1000 == 0 {
			maxWindow = max(maxWindow, s.cur.WindowLen()) // the handler runs under s.mu
		}
		return nil
	})
	waitSubscribed(t, s, 1)
	payload := make([]byte, 0, 64)
	for i := range n {
		hook.slots <- struct{}{}
		sensor := strconv.Itoa(i % 500)
		payload = EncodeReading(payload[:0], Reading{Sensor: sensor, TS: int64(i), Value: 1})
		require.NoError(t, b.srv.Publish("sensors/"+sensor, payload, false, 2))
	}
	require.Eventually(t, func() bool { return s.Stats().Processed == n }, waitFor, time.Millisecond)
	st := s.Stats()
	assert.Equal(t, windowCap, st.WindowLen)
	assert.LessOrEqual(t, maxWindow, windowCap)
	assert.Equal(t, topicCap, st.RetainedLen)
	assert.Zero(t, st.Duplicates)
}
