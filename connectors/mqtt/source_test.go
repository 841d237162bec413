package mqtt

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

const waitFor = 15 * time.Second

// recorder is a Handler that keeps every message it is given.
type recorder struct {
	mu   sync.Mutex
	msgs []Message
}

func (r *recorder) handle(_ context.Context, m Message) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *recorder) snapshot() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.msgs...)
}

// running is a Source whose Run goroutine the test owns.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func runSource(t testing.TB, s *Source, h Handler) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, h) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and returns its result (once; later calls return nil).
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(waitFor):
		t.Fatal("source did not stop")
		return nil
	}
}

func newTestSource(t testing.TB, b *testBroker, id string, opts ...Option) *Source {
	t.Helper()
	base := []Option{
		WithServers(b.url()),
		WithClientID(id),
		WithTopics("sensors/#"),
		WithBackoff(20*time.Millisecond, 200*time.Millisecond),
		WithConnectTimeout(2 * time.Second),
		WithReceiveMaximum(0), // see mochiDeadlockNote
	}
	s, err := NewSource(append(base, opts...)...)
	require.NoError(t, err)
	return s
}

func waitSubscribed(t testing.TB, s *Source, n uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return s.Stats().Subscribes >= n }, waitFor, 5*time.Millisecond,
		"source never subscribed (%d times)", n)
}

func reading(sensor string, ts int64, v float64) []byte {
	return EncodeReading(nil, Reading{Sensor: sensor, TS: ts, Value: v})
}

func TestSourceDeliversReadingsInOrder(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-order")
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)

	const n = 60 // see mochiDeadlockNote
	for i := range n {
		require.NoError(t, b.srv.Publish("sensors/a", reading("a", int64(i), float64(i)/2), false, 2))
	}
	require.Eventually(t, func() bool { return rec.len() == n }, waitFor, 5*time.Millisecond)
	for i, m := range rec.snapshot() {
		assert.Equal(t, Reading{Sensor: "a", TS: int64(i), Value: float64(i) / 2}, m.Reading)
		assert.Equal(t, "sensors/a", m.Topic)
		assert.Equal(t, byte(2), m.QoS)
		assert.NotZero(t, m.PacketID)
	}
	st := s.Stats()
	assert.Equal(t, uint64(n), st.Processed)
	assert.Zero(t, st.Duplicates)
}

// TestDuplicateDeliveryProcessedOnce writes the same QoS 2 PUBLISH (same
// packet id, same payload, DUP set) to the client twice, each time as a
// complete QoS 2 flow, as a broker does when it redelivers after losing
// the PUBCOMP: the client's protocol state has forgotten the id by then,
// so only the dedup window stands between the redelivery and the handler.
func TestDuplicateDeliveryProcessedOnce(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-dup")
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	cl := b.waitClient(t, "edge-dup")

	inject := func(id uint16, payload []byte, dup bool) { injectQoS2(t, cl, id, payload, dup) }
	const id = 4242
	first := reading("x", 1000, 1.5)
	inject(id, first, false)
	require.Eventually(t, func() bool { return rec.len() == 1 }, waitFor, time.Millisecond)
	inject(id, first, true) // the redelivery
	// Same packet id, new content: the id was legitimately reused.
	inject(id, reading("x", 2000, 2.5), false)
	require.Eventually(t, func() bool { return rec.len() == 2 }, waitFor, time.Millisecond)

	got := rec.snapshot()
	assert.Equal(t, int64(1000), got[0].Reading.TS)
	assert.Equal(t, int64(2000), got[1].Reading.TS)
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Duplicates)
	assert.Equal(t, uint64(3), st.Received)
	assert.Equal(t, uint64(2), st.Processed)
}

func TestRetainedNotReprocessedAfterReconnect(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	require.NoError(t, b.srv.Publish("sensors/r", reading("r", 100, 1), true, 1))
	s := newTestSource(t, b, "edge-retained")
	var rec recorder
	runSource(t, s, rec.handle)
	require.Eventually(t, func() bool { return rec.len() == 1 }, waitFor, time.Millisecond)
	require.True(t, rec.snapshot()[0].Retain)

	// The broker drops the connection; the source reconnects, subscribes
	// again and the broker resends the retained message.
	cl := b.waitClient(t, "edge-retained")
	_ = b.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
	waitSubscribed(t, s, 2)
	require.Eventually(t, func() bool { return s.Stats().RetainedSkipped == 1 }, waitFor, time.Millisecond)
	assert.Equal(t, 1, rec.len())

	// A newer retained value on the topic is processed.
	require.NoError(t, b.srv.Publish("sensors/r", reading("r", 200, 2), true, 1))
	require.Eventually(t, func() bool { return rec.len() == 2 }, waitFor, time.Millisecond)
	assert.Equal(t, int64(200), rec.snapshot()[1].Reading.TS)
}

func TestMalformedGoesToDeadLetterTopic(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	dl := collectDeadLetters(t, b, "dlq/edge")
	s := newTestSource(t, b, "edge-dlq", WithDeadLetterTopic("dlq/edge"))
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)

	bad := []struct{ payload, reason string }{
		{`not json`, "invalid character"},
		{`{"sensor":"a","ts":1}`, `"value" is missing`},
		{`{"sensor":"","ts":1,"value":2}`, `"sensor" is missing or empty`},
		{`{"sensor":"a","ts":"yesterday","value":2}`, `"ts" is "yesterday"`},
	}
	for i, c := range bad {
		require.NoError(t, b.srv.Publish("sensors/ok", reading("ok", int64(i), 1), false, 2))
		require.NoError(t, b.srv.Publish("sensors/bad", []byte(c.payload), false, 2))
	}
	require.NoError(t, b.srv.Publish("sensors/ok", reading("ok", 99, 1), false, 2))

	require.Eventually(t, func() bool { return dl.len() == len(bad) }, waitFor, time.Millisecond)
	require.Eventually(t, func() bool { return rec.len() == len(bad)+1 }, waitFor, time.Millisecond, "the stream must continue past bad payloads")
	for i, c := range bad {
		assert.Equal(t, c.payload, dl.payload(i))
		require.Len(t, dl.props(i, PropReason), 1)
		assert.Contains(t, dl.props(i, PropReason)[0], c.reason)
		assert.Equal(t, []string{"sensors/bad"}, dl.props(i, PropSourceTopic))
		assert.NotEqual(t, []string{"0"}, dl.props(i, PropPacketID))
	}
	// The count follows the dead letter's publish, which the broker saw first.
	assert.Eventually(t, func() bool { return s.Stats().DeadLettered == uint64(len(bad)) }, waitFor, time.Millisecond)
}

func TestWrongPasswordIsAClearErrorNotAReconnectStorm(t *testing.T) {
	const secret = "s3cr3t-wrong-pw"
	b := startBroker(t, mqttbroker.Options{Users: map[string]string{"gateway": "right-pw"}})

	t.Run("right password connects", func(t *testing.T) {
		s := newTestSource(t, b, "edge-auth-ok", WithCredentials("gateway", []byte("right-pw")))
		runSource(t, s, func(context.Context, Message) error { return nil })
		waitSubscribed(t, s, 1)
	})
	t.Run("wrong password stops Run", func(t *testing.T) {
		var logs logtest.Buffer
		s := newTestSource(t, b, "edge-auth-bad", WithCredentials("gateway", []byte(secret)),
			WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		r := runSource(t, s, func(context.Context, Message) error { return nil })
		var err error
		select {
		case err = <-r.done:
			close(r.done)
		case <-time.After(waitFor):
			t.Fatal("Run kept retrying a refused password")
		}
		require.ErrorIs(t, err, ErrBadCredentials)
		var ce *ConnectError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, byte(0x86), ce.ReasonCode)
		assert.Contains(t, err.Error(), `user "gateway"`)
		assert.NotContains(t, err.Error(), secret)
		assert.Equal(t, uint64(1), s.Stats().ConnectErrors, "one refused CONNECT, no retries")
		assert.Contains(t, logs.String(), "bad", "the failure is logged")
		assert.NotContains(t, logs.String(), secret, "the password is never logged")
	})
}

func TestCredentialsFromEnv(t *testing.T) {
	t.Setenv("TFLO_TEST_MQTT_USER", "u")
	t.Setenv("TFLO_TEST_MQTT_PASS", "hunter2")
	_, err := NewSource(WithServers("mqtt://127.0.0.1:1"), WithClientID("c"), WithTopics("t"),
		WithCredentialsFromEnv("TFLO_TEST_MQTT_USER", "TFLO_TEST_MQTT_PASS"))
	require.NoError(t, err)
	_, err = NewSource(WithServers("mqtt://127.0.0.1:1"), WithClientID("c"), WithTopics("t"),
		WithCredentialsFromEnv("TFLO_TEST_MQTT_USER", "TFLO_TEST_MQTT_MISSING"))
	require.ErrorContains(t, err, "TFLO_TEST_MQTT_MISSING")
	_, err = NewSource(WithServers("mqtt://u:hunter2@127.0.0.1:1"), WithClientID("c"), WithTopics("t"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
}

func TestNewSourceValidates(t *testing.T) {
	cases := []struct {
		name string
		opts []Option
		want string
	}{
		{"no server", []Option{WithClientID("c"), WithTopics("t")}, "no broker"},
		{"no client id", []Option{WithServers("mqtt://h:1"), WithTopics("t")}, "no client id"},
		{"no topics", []Option{WithServers("mqtt://h:1"), WithClientID("c")}, "no topic filters"},
		{"share in filter", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("$share/g/t")}, "WithSharedGroup"},
		{"bad qos", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithQoS(3)}, "qos 3"},
		{"bad backoff", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithBackoff(time.Second, time.Millisecond)}, "backoff"},
		{"wildcard dlq", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithDeadLetterTopic("dlq/#")}, "dead-letter topic"},
		{"dlq read back", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("tflo/#")}, "would read its own dead letters"},
		{"zero window", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithDedupCapacity(0, 1)}, "capacities"},
		// CONNECT carries whole seconds in 16 bits: 500ms would be 0 (no
		// keep-alive: a dead connection never noticed), 20h would wrap.
		{"sub-second keep-alive", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithKeepAlive(500 * time.Millisecond)}, "keep-alive 500ms"},
		{"keep-alive too long", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithKeepAlive(20 * time.Hour)}, "keep-alive 20h0m0s"},
		{"negative keep-alive", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithKeepAlive(-time.Second)}, "keep-alive -1s"},
		// CONNECT carries whole seconds: 500ms would be 0, a session
		// that ends with the connection, not one that outlives it.
		{"sub-second session expiry", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithSessionExpiry(500 * time.Millisecond)}, "session expiry 500ms is out of range"},
		{"zero connect timeout", []Option{WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithConnectTimeout(0)}, "connect timeout 0s"},
		// autopaho dials neither: it would log "unsupported scheme" (or
		// fail to dial an empty host) at every attempt, for ever.
		{"no scheme", []Option{WithServers("mosquitto:1883"), WithClientID("c"), WithTopics("t")}, `server URL "mosquitto:1883": want mqtt://host:port`},
		{"no host", []Option{WithServers("mqtt:///x"), WithClientID("c"), WithTopics("t")}, `server URL "mqtt:///x": want mqtt://host:port`},
		{"unknown scheme", []Option{WithServers("http://h:1"), WithClientID("c"), WithTopics("t")}, `server URL "http://h:1": scheme "http" is not`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewSource(c.opts...)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := NewSource(WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("t"), WithKeepAlive(0))
	require.NoError(t, err, "0 disables the keep-alive")
}

func TestTopicMatches(t *testing.T) {
	cases := []struct {
		filter, topic string
		want          bool
	}{
		{"#", "a/b", true}, {"a/#", "a", true}, {"a/#", "a/b/c", true}, {"a/+", "a/b", true},
		{"a/+", "a/b/c", false}, {"+/b", "a/b", true}, {"a/b", "a/b", true}, {"a/b", "a/c", false},
		{"a", "a/b", false}, {"#", "$SYS/x", false}, {"+/x", "$SYS/x", false}, {"tflo/deadletter", "tflo/deadletter", true},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, TopicMatches(c.filter, c.topic), "%q vs %q", c.filter, c.topic)
	}
}

func TestSharedSubscriptionSplitsTheStream(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	var mu sync.Mutex
	seen := map[int64]int{}
	per := map[string]int{}
	mk := func(id string) Handler {
		return func(_ context.Context, m Message) error {
			mu.Lock()
			seen[m.Reading.TS]++
			per[id]++
			mu.Unlock()
			return nil
		}
	}
	s1 := newTestSource(t, b, "gw-1", WithSharedGroup("edge"))
	s2 := newTestSource(t, b, "gw-2", WithSharedGroup("edge"))
	runSource(t, s1, mk("gw-1"))
	runSource(t, s2, mk("gw-2"))
	waitSubscribed(t, s1, 1)
	waitSubscribed(t, s2, 1)
	const n = 60 // see mochiDeadlockNote
	for i := range n {
		require.NoError(t, b.srv.Publish("sensors/"+strconv.Itoa(i%7), reading(strconv.Itoa(i%7), int64(i), 1), false, 2))
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n }, waitFor, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for ts, c := range seen {
		assert.Equal(t, 1, c, "reading %d delivered to %d gateways", ts, c)
	}
	assert.Positive(t, per["gw-1"])
	assert.Positive(t, per["gw-2"])
}

func TestHandlerErrorStopsRunWithoutAck(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-herr")
	boom := errors.New("sink down")
	r := runSource(t, s, func(_ context.Context, m Message) error {
		if m.Reading.TS == 1 {
			return boom
		}
		return nil
	})
	waitSubscribed(t, s, 1)
	require.NoError(t, b.srv.Publish("sensors/a", reading("a", 0, 1), false, 2))
	require.NoError(t, b.srv.Publish("sensors/a", reading("a", 1, 1), false, 2))
	var err error
	select {
	case err = <-r.done:
		close(r.done)
	case <-time.After(waitFor):
		t.Fatal("Run did not stop on a handler error")
	}
	require.ErrorIs(t, err, boom)
	var he *HandlerError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "sensors/a", he.Topic)

	// The failed message was not acknowledged: a new Source on the same
	// persistent session gets it again.
	s2 := newTestSource(t, b, "edge-herr")
	var rec recorder
	runSource(t, s2, rec.handle)
	require.Eventually(t, func() bool {
		for _, m := range rec.snapshot() {
			if m.Reading.TS == 1 {
				return true
			}
		}
		return false
	}, waitFor, time.Millisecond)
}

// TestAckOnCheckpointHoldsAcksUntilTheCutIsSaved checks at the broker that
// with WithAckOnCheckpoint a handled QoS 2 message stays unacknowledged
// (its flow open) until the cut containing it is released as saved, that
// release(false) keeps it for the next cut, and that the next saved cut
// completes it.
func TestAckOnCheckpointHoldsAcksUntilTheCutIsSaved(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-defer", WithAckOnCheckpoint())
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	cl := b.waitClient(t, "edge-defer")
	for i := range 3 {
		require.NoError(t, b.srv.Publish("sensors/d", reading("d", int64(i), 1), false, 2))
	}
	require.Eventually(t, func() bool { return rec.len() == 3 }, waitFor, time.Millisecond)
	// Handled, yet the broker still holds all three flows open.
	require.Never(t, func() bool { return cl.State.Inflight.Len() < 3 }, 100*time.Millisecond, 5*time.Millisecond)

	release, err := s.CutWithAck(func([]byte) error { return nil })
	require.NoError(t, err)
	release(false) // the checkpoint failed: nothing acknowledged
	require.Never(t, func() bool { return cl.State.Inflight.Len() < 3 }, 100*time.Millisecond, 5*time.Millisecond)

	release, err = s.CutWithAck(func([]byte) error { return nil })
	require.NoError(t, err)
	release(true)
	require.Eventually(t, func() bool { return cl.State.Inflight.Len() == 0 }, waitFor, time.Millisecond,
		"the saved cut acknowledges its messages")
}

// TestRefusedCredentialsNameTheBrokerThatRefused: with several servers
// the ConnectError named the first one whatever broker refused the user
// (here the first cannot be reached and the second refuses).
func TestRefusedCredentialsNameTheBrokerThatRefused(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{Users: map[string]string{"gateway": "right-pw"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "mqtt://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there
	s, err := NewSource(WithServers(dead, b.url()), WithClientID("edge-auth-second"), WithTopics("sensors/#"),
		WithBackoff(20*time.Millisecond, 200*time.Millisecond), WithConnectTimeout(2*time.Second), WithReceiveMaximum(0),
		WithCredentials("gateway", []byte("wrong-pw")))
	require.NoError(t, err)
	r := runSource(t, s, func(context.Context, Message) error { return nil })
	select {
	case err = <-r.done:
		close(r.done)
	case <-time.After(waitFor):
		t.Fatal("Run kept retrying a refused password")
	}
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, b.url(), ce.Server, "the broker that refused")
	assert.Contains(t, err.Error(), "mqtt connect to "+b.url()+` as user "gateway"`)
}
