package pipeline_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/mosquittotest"
)

// TestMQTTStallOnMosquittoWindowRecovers: Mosquitto sends a client that
// announces no Receive Maximum at most max_inflight_messages (20 by
// default) unacknowledged messages (one it announces takes that limit's
// place: with the source's default 4096 nothing held the stream back and
// this test took no stall checkpoint at all). With AckOnCheckpoint the
// stream stops at the window until a checkpoint acknowledges it; the
// checkpoint interval (1 minute) is far longer than the test, so only
// the stall checkpoints let it through: the first is taken with the
// window pending, before the rest of the readings could arrive, and all
// of them arrive.
func TestMQTTStallOnMosquittoWindowRecovers(t *testing.T) {
	const window, n = 20, 2000
	b := mosquittotest.Start(t, mosquittotest.Options{MaxInflight: window})
	e := newEdgeEnv(t)
	p := e.pipeline(true, time.Minute)
	src := p.Source.(pipeline.MQTTSource)
	src.Servers, src.OmitReceiveMaximum = []string{b.URL()}, true
	p.Source = src
	type stall struct {
		received uint64
		pending  int
	}
	var mu sync.Mutex
	var stalls []stall
	g := e.start(t, p, pipeline.WithStallObserver(func(received uint64, pending int) {
		mu.Lock()
		defer mu.Unlock()
		stalls = append(stalls, stall{received, pending})
	}))

	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "mqtt://"))
	require.NoError(t, err)
	pub := paho.NewClient(paho.ClientConfig{ClientID: "pub", Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = pub.Connect(ctx, &paho.Connect{ClientID: "pub", KeepAlive: 30, CleanStart: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Disconnect(&paho.Disconnect{}) })
	for i := range n {
		payload := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "s", TS: int64(i + 1), Value: 1})
		_, err := pub.Publish(ctx, &paho.Publish{Topic: "sensors/s", QoS: 1, Payload: payload})
		require.NoError(t, err)
	}

	// Recovers: every reading is taken, long before the interval.
	deadline := time.Now().Add(waitFor)
	for g.w.Stats().RecordsIn < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling the worker's counter against its deadline
	}
	st := g.w.Stats()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, uint64(n), st.RecordsIn, "readings taken in %s through Mosquitto's window of %d (stall checkpoints at %+v)", waitFor, window, stalls)
	// Held back: the first stall checkpoint found the window full.
	require.NotEmpty(t, stalls, "no stall checkpoint: the broker did not hold the stream back")
	require.Equal(t, stall{window, window}, stalls[0], "the first stall checkpoint (received, pending): the broker holds the stream at its window of %d", window)
	t.Logf("%d readings through a window of %d; stall checkpoints at (received, pending) %+v", n, window, stalls)
}
