package mqtt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// TestBrokerRestartMidStreamKeepsThePersistentSession stops the broker
// while messages are in flight, starts it again from its store on the same
// address, queues more messages for the offline session before the broker
// accepts connections, and checks that the source — reconnecting with
// Clean Start false — processes every reading exactly once.
func TestBrokerRestartMidStreamKeepsThePersistentSession(t *testing.T) {
	store := t.TempDir()
	b1 := startBroker(t, mqttbroker.Options{Hooks: sessionStore(store)})
	addr := b1.addr

	var mu sync.Mutex
	count := map[int64]int{}
	s := newTestSource(t, b1, "edge-restart", WithSessionExpiry(time.Hour))
	runSource(t, s, func(_ context.Context, m Message) error {
		mu.Lock()
		count[m.Reading.TS]++
		mu.Unlock()
		return nil
	})
	waitSubscribed(t, s, 1)
	processed := func() int { mu.Lock(); defer mu.Unlock(); return len(count) }

	for i := range 50 {
		require.NoError(t, b1.srv.Publish("sensors/r", reading("r", int64(i), 1), false, 2))
	}
	require.Eventually(t, func() bool { return processed() == 50 }, waitFor, time.Millisecond)
	// Mid-stream: publish and stop the broker without waiting.
	for i := 50; i < 100; i++ {
		require.NoError(t, b1.srv.Publish("sensors/r", reading("r", int64(i), 1), false, 2))
	}
	b1.close()
	connects := s.Stats().Connects

	b2 := startBroker(t, mqttbroker.Options{Hooks: sessionStore(store), Addr: addr, DeferListen: true})
	for i := 100; i < 150; i++ { // queued for the offline session
		require.NoError(t, b2.srv.Publish("sensors/r", reading("r", int64(i), 1), false, 2))
	}
	b2.listenLater()
	require.Equal(t, addr, b2.addr)

	if !assert.Eventually(t, func() bool { return processed() == 150 }, waitFor, 5*time.Millisecond,
		"readings lost across the broker restart") {
		mu.Lock()
		var missing []int64
		for ts := range int64(150) {
			if count[ts] == 0 {
				missing = append(missing, ts)
			}
		}
		mu.Unlock()
		t.Fatalf("missing %v; stats %+v", missing, s.Stats())
	}
	assert.Greater(t, s.Stats().Connects, connects, "the source reconnected")
	mu.Lock()
	defer mu.Unlock()
	for ts := range int64(150) {
		assert.Equal(t, 1, count[ts], "reading %d processed %d times", ts, count[ts])
	}
}

// TestStatsSayWhileTheConnectionIsDown: Stats counted connects and
// subscribes, which only grow, so nothing told that the connection was
// down now (a pipeline worker stayed ready with its broker stopped).
// Connected and Subscribed say it: both true once subscribed, false while
// the broker is down, true again after the reconnect and resubscribe, and
// false once Run returned.
func TestStatsSayWhileTheConnectionIsDown(t *testing.T) {
	b1 := startBroker(t, mqttbroker.Options{})
	addr := b1.addr
	s := newTestSource(t, b1, "edge-link")
	st := s.Stats()
	require.False(t, st.Connected || st.Subscribed, "before Run")
	r := runSource(t, s, func(context.Context, Message) error { return nil })
	linked := func() bool { st := s.Stats(); return st.Connected && st.Subscribed }
	require.Eventually(t, linked, waitFor, 5*time.Millisecond, "connected and subscribed")

	b1.close()
	require.Eventually(t, func() bool { st := s.Stats(); return !st.Connected && !st.Subscribed }, waitFor, 5*time.Millisecond,
		"the connection is down")
	subscribes := s.Stats().Subscribes

	startBroker(t, mqttbroker.Options{Addr: addr})
	require.Eventually(t, linked, waitFor, 5*time.Millisecond, "connected and subscribed again")
	require.Greater(t, s.Stats().Subscribes, subscribes, "subscribed on the new connection")

	require.NoError(t, r.stop(t))
	st = s.Stats()
	require.False(t, st.Connected || st.Subscribed, "after Run")
}
