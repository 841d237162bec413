package pipeline_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/mosquittotest"
)

// TestMQTTStallOnMosquittoWindowRecovers: Mosquitto sends at most 20
// unacknowledged messages (max_inflight_messages), so with
// AckOnCheckpoint the stream stops at 20 pending until a checkpoint; the
// stall detector checkpoints at the first lull at that window, and 2000
// readings arrive long before the (1 minute) checkpoint interval would
// have let more than one window through.
func TestMQTTStallOnMosquittoWindowRecovers(t *testing.T) {
	b := mosquittotest.Start(t)
	e := newEdgeEnv(t)
	p := e.pipeline(true, time.Minute)
	src := p.Source.(pipeline.MQTTSource)
	src.Servers, src.OmitReceiveMaximum = []string{b.URL()}, false
	p.Source = src
	g := e.start(t, p)

	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "mqtt://"))
	require.NoError(t, err)
	pub := paho.NewClient(paho.ClientConfig{ClientID: "pub", Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = pub.Connect(ctx, &paho.Connect{ClientID: "pub", KeepAlive: 30, CleanStart: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Disconnect(&paho.Disconnect{}) })
	const n = 2000
	start := time.Now()
	for i := range n {
		payload := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "s", TS: int64(i + 1), Value: 1})
		_, err := pub.Publish(ctx, &paho.Publish{Topic: "sensors/s", QoS: 1, Payload: payload})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == n }, waitFor, time.Millisecond)
	t.Logf("%d readings through a window of 20 in %s", n, time.Since(start))
}
