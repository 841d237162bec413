package simulator_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
	"github.com/tflo-io/tflo/workers/simulator"
)

func TestSimulatorPublishesToRealBroker(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A subscriber counts what arrives. Its session outlives a reconnect,
	// so a dropped connection loses no QoS 2 message.
	// Probes are counted apart: more than one may be in flight when the
	// first comes back, and a late one must not count as a duplicate;
	// and one published before the subscription took effect reaches no
	// one (so fewer may come back than were sent). The marker, published
	// once everything else was delivered, is the last thing on the
	// subscriber's connection: once it is back, nothing published
	// before it is still on its way.
	var got, probes, markers, ups atomic.Int64
	u, _ := url.Parse(b.URL())
	sub, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 20, CleanStartOnInitialConnection: true, SessionExpiryInterval: 60,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			ups.Add(1)
			_, _ = cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "sensors/#", QoS: 2}}})
		},
		ClientConfig: paho.ClientConfig{ClientID: "counter", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				switch pr.Packet.Topic {
				case "sensors/probe":
					probes.Add(1)
				case "sensors/marker":
					markers.Add(1)
				default:
					got.Add(1)
				}
				return true, nil
			},
		}},
	})
	require.NoError(t, err)
	require.NoError(t, sub.AwaitConnection(ctx))
	// Wait until the subscription is active: a probe message comes back.
	probe, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL(), ClientID: "probe"})
	require.NoError(t, err)
	var probesSent int64
	require.Eventually(t, func() bool {
		if probe.Publish(ctx, "sensors/probe", []byte("{}")) == nil {
			probesSent++
		}
		return probes.Load() > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, probe.Close(ctx))

	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL()})
	require.NoError(t, err)
	s, err := simulator.New(simulator.Config{Sensors: 5, Rounds: 40, Start: time.Unix(0, 0)})
	require.NoError(t, err)
	require.NoError(t, s.Run(ctx, pub))
	require.NoError(t, pub.Close(ctx))
	if !assert.Eventually(t, func() bool { return got.Load() == 200 }, 10*time.Second, 20*time.Millisecond) {
		i := b.Info()
		t.Fatalf("QoS 2: every one of the 200 payloads arrives exactly once: got %d (and %d probes); the subscriber connected %d times; the broker received %d publishes, sent %d, dropped %d (in flight dropped %d)",
			got.Load(), probes.Load(), ups.Load(), i.MessagesReceived, i.MessagesSent, i.MessagesDropped, i.InflightDropped)
	}
	// The marker comes back after anything published before it, so a
	// duplicate on its way would have arrived by then and made it 201.
	marker, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL(), ClientID: "marker"})
	require.NoError(t, err)
	require.NoError(t, marker.Publish(ctx, "sensors/marker", []byte("{}")))
	require.NoError(t, marker.Close(ctx))
	require.Eventually(t, func() bool { return markers.Load() == 1 }, 10*time.Second, 20*time.Millisecond, "the marker never came back")
	assert.LessOrEqual(t, probes.Load(), probesSent, "probes delivered at most once each")
	assert.Equal(t, int64(200), got.Load(), "simulator payloads delivered once each")
	assert.Equal(t, int64(1), markers.Load())
	st := s.Stats()
	assert.Equal(t, int64(200), st.Readings+st.Malformed)
}

func TestDialMQTTBadURL(t *testing.T) {
	_, err := simulator.DialMQTT(context.Background(), simulator.MQTTOptions{URL: "nohost"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `broker URL "nohost"`)
}

// A process stopped by its context returns nil and logs its counts, with
// no error: a requested stop is not a failure.
func TestProcessStopIsNoError(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	var cfg simulator.MainConfig
	cfg.Sensors, cfg.Interval = 2, time.Millisecond
	cfg.MQTT.URL = b.URL()
	p, logs, stop := runLogged(t, cfg)
	require.Eventually(t, func() bool { st := p.Stats(); return st.Readings+st.Malformed >= 20 }, 10*time.Second, 5*time.Millisecond)
	stop()
	require.Contains(t, logs(), `msg="simulator stopped" readings=`)
	require.NotContains(t, logs(), "err=")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestDialMQTTFailsOnRefusedCredentials: a broker refusing the
// simulator's user is an error naming the broker and the user, at once,
// not a wait until the context ends.
func TestDialMQTTFailsOnRefusedCredentials(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{Users: map[string]string{"sim": "right"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL(), Username: "sim", Password: "wrong"})
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "DialMQTT waited for its context: %v", err)
	u, _ := url.Parse(b.URL())
	require.Contains(t, err.Error(), `broker `+u.Host+` refused user "sim"`)
	require.NotContains(t, err.Error(), "wrong", "the password")
}

// TestProcessLogsFailedConnects: while the broker cannot be reached the
// process says so in its log (it waits for the broker), and a stop
// still returns nil.
func TestProcessLogsFailedConnects(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there
	var cfg simulator.MainConfig
	cfg.MQTT.URL = "mqtt://" + addr
	_, logs, stop := runLogged(t, cfg)
	require.Eventually(t, func() bool {
		return strings.Contains(logs(), `msg="mqtt connect failed; retrying with backoff" broker=`+addr)
	}, 10*time.Second, 5*time.Millisecond)
	stop()
}

// runLogged runs a simulator process of cfg, logging to a buffer; logs
// reads it, stop ends the run and requires it to return nil (a requested
// stop is no failure).
func runLogged(t *testing.T, cfg simulator.MainConfig) (p *simulator.Process, logs func() string, stop func()) {
	t.Helper()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	p, err := simulator.NewProcess(cfg, log, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, nil) }()
	logs = func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	stop = func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
	return p, logs, stop
}

// TestProcessRefusesAnUnsetPasswordVariable: mqtt.password_env naming a
// variable that is unset or empty is an error naming the key and the
// variable, not a login with an empty password.
func TestProcessRefusesAnUnsetPasswordVariable(t *testing.T) {
	t.Setenv("TFLO_TEST_SIMULATOR_PASSWORD", "")
	var cfg simulator.MainConfig
	cfg.MQTT.URL, cfg.MQTT.Username, cfg.MQTT.PasswordEnv = "mqtt://127.0.0.1:1", "sim", "TFLO_TEST_SIMULATOR_PASSWORD"
	_, err := simulator.NewProcess(cfg, slog.New(slog.DiscardHandler), nil)
	require.ErrorContains(t, err, "mqtt.password_env names TFLO_TEST_SIMULATOR_PASSWORD, which is unset or empty")
}

// TestProcessRidesOutABrokerRestart: when its broker goes away the
// process waits for it and goes on publishing once it is back (the
// worker's MQTT source does the same), instead of ending the run with
// the publish's error.
func TestProcessRidesOutABrokerRestart(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	var cfg simulator.MainConfig
	cfg.Sensors, cfg.Interval, cfg.Pace = 2, time.Millisecond, true
	cfg.MQTT.URL = b.URL()
	p, logs, stop := runLogged(t, cfg)
	published := func() int64 { st := p.Stats(); return st.Readings + st.Malformed }
	require.Eventually(t, func() bool { return published() >= 20 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { return p.Ready(context.Background()) != nil }, 10*time.Second, 5*time.Millisecond)
	mqttbrokertest.Start(t, mqttbroker.Options{Addr: b.Addr()})
	n := published()
	if !assert.Eventually(t, func() bool { return published() >= n+20 }, 20*time.Second, 5*time.Millisecond) {
		t.Fatalf("the process published nothing after its broker came back; log:\n%s", logs())
	}
	require.NoError(t, p.Ready(context.Background()))
	stop()
	require.Contains(t, logs(), `msg="mqtt connection lost; publishing again once reconnected" broker=`+b.Addr())
	require.NotRegexp(t, `msg="simulator stopped".*err=`, logs())
}

// TestPublishRefusedByTheBrokerIsAnError: a broker refusing a QoS 2
// publish answers PUBREC with a reason code of 0x80 or more (here its
// ACL denies the topic); paho returns that response with no error, and
// the simulator counted the reading as published, though it went
// nowhere. It is an error naming the broker, the topic and the reason.
func TestPublishRefusedByTheBrokerIsAnError(t *testing.T) {
	addr := mqttbrokertest.Start(t, mqttbroker.Options{Ledger: &auth.Ledger{
		Auth: auth.AuthRules{{Allow: true}},
		ACL:  auth.ACLRules{{Filters: auth.Filters{"sensors/#": auth.Deny}}},
	}}).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: "mqtt://" + addr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	err = pub.Publish(ctx, "sensors/sensor-000", []byte(`{"sensor":"sensor-000","ts":1,"value":1}`))
	require.ErrorContains(t, err, `broker `+addr+` refused the publish to "sensors/sensor-000": reason code 0x87`)

	s, err := simulator.New(simulator.Config{Sensors: 1, Rounds: 1, Malformed: -1})
	require.NoError(t, err)
	require.Error(t, s.Run(ctx, pub), "a run whose readings the broker refuses fails")
	assert.Zero(t, s.Stats().Readings, "no refused reading is counted")
}

// TestPublishAfterCloseIsErrStopped: a publish after Close fails with an
// error wrapping ErrStopped, naming the topic and the broker, as
// ErrStopped's doc says. Bug: nothing returned ErrStopped; such a publish
// failed with autopaho's bare "no connection available".
func TestPublishAfterCloseIsErrStopped(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL()})
	require.NoError(t, err)
	require.NoError(t, pub.Close(ctx))
	err = pub.Publish(ctx, "sensors/sensor-000", []byte(`{"sensor":"sensor-000","ts":1,"value":1}`))
	require.ErrorIs(t, err, simulator.ErrStopped)
	require.ErrorContains(t, err, `publish to "sensors/sensor-000" on broker `+b.Addr())
}

// TestPublishTheBrokerDropsIsAnError: a payload larger than the broker's
// maximum packet size makes it drop the connection (mochi announces no
// maximum in its CONNACK), and the publish was sent again after each
// reconnect, for ever: the simulator hung, publishing nothing more,
// saying only "mqtt connection lost". After three drops in a row of the
// same publish it is an error naming the broker, the topic and the size;
// a publish that fits goes through.
func TestPublishTheBrokerDropsIsAnError(t *testing.T) {
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = 256
	addr := mqttbrokertest.Start(t, mqttbroker.Options{Capabilities: caps}).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: "mqtt://" + addr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	err = pub.Publish(ctx, "sensors/big", bytes.Repeat([]byte("x"), 1000))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "before the test's deadline: %v", err)
	require.ErrorContains(t, err, `broker `+addr+` dropped the connection at each of 3 publishes of 1000 bytes to "sensors/big"`)
	require.NoError(t, pub.Publish(ctx, "sensors/small", []byte("1")), "a payload that fits goes through")
}
