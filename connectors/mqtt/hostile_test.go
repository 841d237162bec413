package mqtt

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// deadLetters records what the broker receives on a dead-letter topic.
type deadLetters struct {
	mu   sync.Mutex
	list []packets.Packet
}

func collectDeadLetters(t *testing.T, b *testBroker, topic string) *deadLetters {
	t.Helper()
	d := &deadLetters{}
	require.NoError(t, b.srv.Subscribe(topic, 1, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		d.mu.Lock()
		d.list = append(d.list, pk)
		d.mu.Unlock()
	}))
	return d
}

func (d *deadLetters) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.list)
}

// payload returns dead letter i's payload.
func (d *deadLetters) payload(i int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return string(d.list[i].Payload)
}

// props returns every value of user property key in dead letter i.
func (d *deadLetters) props(i int, key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var vs []string
	for _, u := range d.list[i].Properties.User {
		if u.Key == key {
			vs = append(vs, u.Val)
		}
	}
	return vs
}

// TestReadingsOutOfLimitsAreDeadLettered is issues 17.1, 17.2 and 17.8 at
// the MQTT source: a 1.7e308 value (which overflows operators' sums), a
// sensor id outside the key pattern or too long, a ts far in the future
// (which pinned the lag gauge) or beyond int64 nanoseconds (ts × scale
// wrapped) were all handed to the graph. They are dead-lettered now, with
// the reason, and the stream goes on.
func TestReadingsOutOfLimitsAreDeadLettered(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	dl := collectDeadLetters(t, b, "dlq/edge")
	s := newTestSource(t, b, "edge-limits", WithDeadLetterTopic("dlq/edge"))
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)

	now := time.Now().UnixMilli()
	long := strings.Repeat("k", 200)
	bad := []struct {
		sensor string
		ts     int64
		value  float64
		reason string
	}{
		{"big", now, 1.7e308, "value 1.7e+308 is outside"},
		{"neg", now, -2e15, "value -2e+15 is outside"},
		{"bad key", now, 1, `key "bad key" does not match`},
		{long, now, 1, "is longer than 128 bytes"},
		{"future", now + 48*time.Hour.Milliseconds(), 1, "ahead of the clock"},
		{"wrap", 9_300_000_000_000_000, 1, "does not fit the int64 nanosecond range"},
	}
	for _, c := range bad {
		require.NoError(t, b.srv.Publish("sensors/"+c.sensor, reading(c.sensor, c.ts, c.value), false, 2))
	}
	require.NoError(t, b.srv.Publish("sensors/ok", reading("ok", now, 21.5), false, 2))

	require.Eventually(t, func() bool { return dl.len() == len(bad) }, waitFor, time.Millisecond)
	require.Eventually(t, func() bool { return rec.len() == 1 }, waitFor, time.Millisecond, "the stream goes on")
	assert.Equal(t, "ok", rec.snapshot()[0].Reading.Sensor)
	for i, c := range bad {
		reason := dl.props(i, PropReason)
		require.Len(t, reason, 1)
		assert.Contains(t, reason[0], "reading out of limits")
		assert.Contains(t, reason[0], c.reason)
		assert.Less(t, len(reason[0]), 400, "a long key is shortened in the reason")
	}
	st := s.Stats()
	assert.Equal(t, uint64(len(bad)), st.DeadLettered)
	assert.Equal(t, now, st.NewestTS, "a far-future ts never reaches the newest-ts gauge")
}

// TestFarFutureTSDoesNotPoisonRetainedSequences is issue 17.8: one reading
// with a far-future ts set its topic's retained sequence for good, so
// every later retained message on the topic was dropped as stale.
func TestFarFutureTSDoesNotPoisonRetainedSequences(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	s1 := newTestSource(t, b, "edge-poison-1")
	var rec1 recorder
	r1 := runSource(t, s1, rec1.handle)
	waitSubscribed(t, s1, 1)
	now := time.Now().UnixMilli()
	require.NoError(t, b.srv.Publish("sensors/r", reading("r", now+365*24*time.Hour.Milliseconds(), 1), false, 2))
	require.NoError(t, b.srv.Publish("sensors/q", reading("q", now, 1), false, 2))
	require.Eventually(t, func() bool { return s1.Stats().Received == 2 }, waitFor, time.Millisecond)
	var cursor []byte
	require.NoError(t, s1.Cut(func(c []byte) error { cursor = append([]byte(nil), c...); return nil }))
	require.NoError(t, r1.stop(t))

	// A retained reading of now, seen by a gateway restored from that
	// cursor on a new subscription.
	require.NoError(t, b.srv.Publish("sensors/r", reading("r", now, 2), true, 1))
	s2 := newTestSource(t, b, "edge-poison-2", WithCursor(cursor))
	var rec2 recorder
	runSource(t, s2, rec2.handle)
	require.Eventually(t, func() bool { return rec2.len() == 1 }, waitFor, time.Millisecond, "the retained reading was dropped as stale: %+v", s2.Stats())
	assert.True(t, rec2.snapshot()[0].Retain)
	assert.Equal(t, now, rec2.snapshot()[0].Reading.TS)
}

// TestSensorMustMatchTopic is issue 17.3: the sensor id came from the
// payload and the topic was ignored, so a client allowed to publish only
// on sensors/dev1 could write any sensor's state. By default the id must
// be the topic's last level; a mismatch is dead-lettered.
func TestSensorMustMatchTopic(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	dl := collectDeadLetters(t, b, "dlq/edge")
	s := newTestSource(t, b, "edge-topic", WithDeadLetterTopic("dlq/edge"))
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	require.NoError(t, b.srv.Publish("sensors/dev1", reading("dev2", 1, 1), false, 2))
	require.NoError(t, b.srv.Publish("sensors/dev1", reading("dev1", 2, 1), false, 2))
	require.Eventually(t, func() bool { return dl.len() == 1 && rec.len() == 1 }, waitFor, time.Millisecond)
	assert.Equal(t, "dev1", rec.snapshot()[0].Reading.Sensor)
	reason := dl.props(0, PropReason)
	require.Len(t, reason, 1)
	assert.Contains(t, reason[0], ErrTopicMismatch.Error())
	assert.Contains(t, reason[0], `sensor "dev2" is not "dev1"`)

	// Configurable off, for topic layouts that do not end in the id.
	b2 := startBroker(t, mqttbroker.Options{})
	s2 := newTestSource(t, b2, "edge-topic-off", WithRequireTopicMatch(false))
	var rec2 recorder
	runSource(t, s2, rec2.handle)
	waitSubscribed(t, s2, 1)
	require.NoError(t, b2.srv.Publish("sensors/gateway-7", reading("dev2", 1, 1), false, 2))
	require.Eventually(t, func() bool { return rec2.len() == 1 }, waitFor, time.Millisecond)
}

// TestOversizedPayloadRefusedByBroker is issue 17.2: a 1.1 MB sensor id
// was accepted. The source now announces a Maximum Packet Size in
// CONNECT, so the broker never delivers such a packet; the next reading
// flows as usual.
func TestOversizedPayloadRefusedByBroker(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-huge")
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	huge := strings.Repeat("h", 1_100_000)
	require.NoError(t, b.srv.Publish("sensors/huge", reading(huge, 1, 1), false, 2))
	require.NoError(t, b.srv.Publish("sensors/ok", reading("ok", 2, 1), false, 2))
	require.Eventually(t, func() bool { return rec.len() >= 1 }, waitFor, time.Millisecond)
	for _, m := range rec.snapshot() {
		assert.Equal(t, "ok", m.Reading.Sensor)
	}
	assert.Equal(t, uint64(1), s.Stats().Received, "the broker must not deliver the oversized packet")
}

// The MQTT half of issue 17.11: a dead letter's user properties are the
// source's own; properties the publisher set (a forged reason or origin)
// are not carried over.
func TestDeadLetterIgnoresPublisherProperties(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	dl := collectDeadLetters(t, b, "dlq/edge")
	s := newTestSource(t, b, "edge-forge", WithDeadLetterTopic("dlq/edge"))
	runSource(t, s, func(context.Context, Message) error { return nil })
	waitSubscribed(t, s, 1)

	conn, err := net.Dial("tcp", b.addr)
	require.NoError(t, err)
	pub := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: "forger"})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = pub.Connect(ctx, &paho.Connect{ClientID: "forger", CleanStart: true, KeepAlive: 30})
	require.NoError(t, err)
	defer func() { _ = pub.Disconnect(&paho.Disconnect{}) }()
	props := &paho.PublishProperties{}
	props.User.Add(PropReason, "forged: nothing wrong")
	props.User.Add(PropSourceTopic, "sensors/elsewhere")
	props.User.Add(PropPacketID, strconv.Itoa(9))
	_, err = pub.Publish(ctx, &paho.Publish{Topic: "sensors/x", QoS: 1, Payload: []byte("not json"), Properties: props})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return dl.len() == 1 }, waitFor, time.Millisecond)
	reason := dl.props(0, PropReason)
	require.Len(t, reason, 1)
	assert.Contains(t, reason[0], "invalid character")
	assert.Equal(t, []string{"sensors/x"}, dl.props(0, PropSourceTopic))
	assert.Len(t, dl.props(0, PropPacketID), 1)
}

// TestDeadLetterLogIsSampled: a stream of malformed payloads writes a
// sample of dead-letter lines, not one per payload, while every payload is
// dead-lettered and counted.
func TestDeadLetterLogIsSampled(t *testing.T) {
	const n = 40
	b := startBroker(t, mqttbroker.Options{})
	dl := collectDeadLetters(t, b, "dlq/edge")
	logs := logtest.NewCounter("mqtt payload dead-lettered")
	start := time.Now()
	s := newTestSource(t, b, "edge-sampled", WithDeadLetterTopic("dlq/edge"), WithLogger(logs.Logger()))
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	for i := range n {
		require.NoError(t, b.srv.Publish("sensors/s1", []byte("not json "+strconv.Itoa(i)), false, 1))
	}
	require.Eventually(t, func() bool { return dl.len() == n }, waitFor, time.Millisecond)
	assert.Eventually(t, func() bool { return s.Stats().DeadLettered == uint64(n) }, waitFor, time.Millisecond)
	logs.RequireSampled(t, n, time.Since(start))
}
