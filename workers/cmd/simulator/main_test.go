package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/loopport"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
)

// TestSimulatorMainRunsItsRounds: the simulator main publishes its rounds
// to a real broker (seen by a subscriber) and exits 0 by itself.
func TestSimulatorMainRunsItsRounds(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	got := make(chan struct{}, 100)
	u, err := url.Parse(b.URL())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribed := make(chan struct{})
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 20, CleanStartOnInitialConnection: true,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "sensors/#", QoS: 1}}}); err == nil {
				close(subscribed)
			}
		},
		ClientConfig: paho.ClientConfig{ClientID: "main-test", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(paho.PublishReceived) (bool, error) { got <- struct{}{}; return true, nil }}},
	})
	require.NoError(t, err)
	<-subscribed
	defer cm.Disconnect(context.Background())
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", b.URL())
	t.Setenv("TFLO_SIMULATOR_SENSORS", "2")
	t.Setenv("TFLO_SIMULATOR_ROUNDS", "5")
	t.Setenv("TFLO_SIMULATOR_MALFORMED", "0.000001")
	// A worker's variables in the same environment are not the
	// simulator's: TFLO_SENSORS or TFLO_METRICS_ADDR would have collided.
	t.Setenv("TFLO_METRICS_ADDR", "not-an-address")
	t.Setenv("TFLO_SENSORS", "many")
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(Main(), nil, &errOut), errOut.String())
	require.Eventually(t, func() bool { return len(got) == 10 }, 10*time.Second, 10*time.Millisecond)
}

func TestSimulatorMainHelp(t *testing.T) {
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(Main(), []string{"--help"}, &errOut))
	for _, k := range []string{"mqtt.url", "TFLO_SIMULATOR_MQTT_URL", "sensors", "TFLO_SIMULATOR_SENSORS", "TFLO_SIMULATOR_METRICS_ADDR"} {
		require.Contains(t, errOut.String(), k)
	}
	// Bug: the zero start time showed as its default ("default
	// 0001-01-01T00:00:00Z"); the zero start follows the clock.
	require.NotContains(t, errOut.String(), "0001-01-01")
	// Bug: the help said SIGINT/SIGTERM "drain the worker and take a final
	// checkpoint": the simulator has no checkpoints.
	require.NotContains(t, errOut.String(), "checkpoint")
	require.Contains(t, errOut.String(), "SIGINT/SIGTERM stop the simulator")
	// Bug: --print-config promised "(and spec)" and --probe "a worker's
	// /readyz": the simulator has no spec, and it probes its own /readyz
	// (docker-compose's health check of the simulator).
	require.NotContains(t, errOut.String(), "spec")
	require.NotContains(t, errOut.String(), "worker's")
	require.Contains(t, errOut.String(), "the /readyz or /healthz this binary serves")
}

// TestPrintConfigShowsWhatRuns: --print-config prints the fleet's
// defaults, which the run uses. Bug: it printed the zero values (sensors
// 0, interval 0s, malformed 0, topic "") of the keys left unset.
func TestPrintConfigShowsWhatRuns(t *testing.T) {
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", "mqtt://127.0.0.1:1")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	out := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); out <- string(b) }()
	stdout := os.Stdout
	os.Stdout = w
	var stderr bytes.Buffer
	code := worker.RunMain(Main(), []string{"--print-config"}, &stderr)
	os.Stdout = stdout
	require.NoError(t, w.Close())
	printed := <-out
	require.Equal(t, worker.ExitOK, code, "%s", &stderr)
	for _, want := range []string{"sensors = 10", "interval = 100ms", "malformed = 0.01", `topic = "sensors"`, `mqtt.client_id = "tflo-simulator"`} {
		require.Contains(t, printed, want)
	}
}

// TestPasswordVariableUnderThePrefix: the variable mqtt.password_env
// names may be a TFLO_SIMULATOR_ one; it holds the password, it is not
// refused as naming no key.
func TestPasswordVariableUnderThePrefix(t *testing.T) {
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", "mqtt://127.0.0.1:1")
	t.Setenv("TFLO_SIMULATOR_MQTT_PASSWORD_ENV", "TFLO_SIMULATOR_MQTT_PASSWORD")
	t.Setenv("TFLO_SIMULATOR_MQTT_PASSWORD", "secret")
	printConfig(t, worker.ExitOK)
}

// TestSimulatorReadyOnlyWhenConnected: the simulator's /readyz (its
// container's health check, simulator --probe) answers 503 naming the
// broker while the simulator cannot reach it, and 200 once connected.
// Bug: it answered 200 as soon as the main started, with no broker.
func TestSimulatorReadyOnlyWhenConnected(t *testing.T) {
	brokerAddr, err := loopport.Pick() // nothing listens there yet
	require.NoError(t, err)
	metricsAddr, err := loopport.Pick()
	require.NoError(t, err)
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", "mqtt://"+brokerAddr)
	t.Setenv("TFLO_SIMULATOR_METRICS_ADDR", metricsAddr)
	t.Setenv("TFLO_SIMULATOR_SENSORS", "1")
	t.Setenv("TFLO_SIMULATOR_PACE", "true")
	var errOut logtest.Buffer
	done := make(chan int, 1)
	go func() { done <- worker.RunMain(Main(), nil, &errOut) }()
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The simulator is running (its readiness check set) and failing to
	// reach the broker.
	require.Eventually(t, func() bool {
		return strings.Contains(errOut.String(), "mqtt connect failed; retrying with backoff")
	}, 20*time.Second, 10*time.Millisecond, "%s", &errOut)
	code, body := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "not connected to broker mqtt://"+brokerAddr)

	mqttbrokertest.Start(t, mqttbroker.Options{Addr: brokerAddr})
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond, "%s", &errOut)

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, worker.ExitOK, code, errOut.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("the simulator did not stop within 20s of SIGTERM: %s", &errOut)
	}
}

// TestSimulatorRefusesABrokerURLItCannotDial: an mqtt.url with no host or
// a scheme the MQTT client cannot dial is a usage error (exit code 2)
// naming the key and the URL, --print-config included. Bug: it was
// accepted; the run then failed (exit 1) or, for http://, retried for
// ever.
func TestSimulatorRefusesABrokerURLItCannotDial(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:1883", "mosquitto:1883"} {
		t.Run(u, func(t *testing.T) {
			t.Setenv("TFLO_SIMULATOR_MQTT_URL", u)
			for _, args := range [][]string{{"--print-config"}, nil} {
				var errOut bytes.Buffer
				require.Equal(t, worker.ExitUsage, worker.RunMain(Main(), args, &errOut), "%v: %s", args, &errOut)
				require.Contains(t, errOut.String(), `simulator config: mqtt.url: broker URL "`+u+`"`)
			}
		})
	}
}

// TestSimulatorNamesTheFlagOfAConfigThatIsNotThere: a --config file that
// is not there is a usage error (exit code 2) naming the flag. Bug: it
// said "file nope.yaml: no such file or directory", naming no flag.
func TestSimulatorNamesTheFlagOfAConfigThatIsNotThere(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitUsage, worker.RunMain(Main(), []string{"--config", missing}, &errOut), "%s", &errOut)
	require.Equal(t, "simulator: invalid configuration:\n--config \""+missing+"\": no such file or directory\n", errOut.String())
}

// TestSimulatorRefusesAMetricsAddressWithoutAPort: metrics.addr without a
// port is a usage error (exit code 2) naming the key, as the worker's is.
// Bug: --print-config accepted it and the run failed on the listener
// (exit code 1).
func TestSimulatorRefusesAMetricsAddressWithoutAPort(t *testing.T) {
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", "mqtt://127.0.0.1:1")
	t.Setenv("TFLO_SIMULATOR_METRICS_ADDR", "nohost")
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitUsage, worker.RunMain(Main(), []string{"--print-config"}, &errOut), "%s", &errOut)
	require.Contains(t, errOut.String(), `simulator config: metrics.addr "nohost": want host:port`)
}

// TestSimulatorRefusesATopicItCannotPublishTo: a topic with an MQTT
// wildcard, or one starting with $ (the broker's own, $SYS), is a usage
// error (exit code 2) naming the key, --print-config included. Bug: both
// were accepted; the broker dropped the connection at each publish (a
// topic name holds no wildcard; the embedded broker refuses $SYS) and the
// simulator, taking that for an outage, reconnected and published again
// for ever. No subscription to # or + (the edge's sensors/#) would read a
// $ topic anyway.
func TestSimulatorRefusesATopicItCannotPublishTo(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", b.URL())
	t.Setenv("TFLO_SIMULATOR_ROUNDS", "1")
	for topic, want := range map[string]string{
		"plant/+":      `simulator: topic "plant/+" must be a topic name without wildcards`,
		"plant/#":      `simulator: topic "plant/#" must be a topic name without wildcards`,
		"$SYS/sensors": `simulator: topic "$SYS/sensors" must not start with $`,
	} {
		t.Run(topic, func(t *testing.T) {
			t.Setenv("TFLO_SIMULATOR_TOPIC", topic)
			for _, args := range [][]string{{"--print-config"}, nil} {
				var errOut logtest.Buffer
				done := make(chan int, 1)
				go func() { done <- worker.RunMain(Main(), args, &errOut) }()
				select {
				case code := <-done:
					require.Equal(t, worker.ExitUsage, code, "%v: %s", args, &errOut)
				case <-time.After(15 * time.Second):
					t.Fatalf("%v: still running after 15s (one round); log:\n%s", args, &errOut)
				}
				require.Contains(t, errOut.String(), want)
			}
		})
	}
}

// TestSimulatorRefusesABrokerURLWithUserInfo: an mqtt.url carrying a
// login (mqtt://user:password@host) is a usage error (exit code 2) naming
// the key, without the password. Bug: it was accepted and the login
// ignored (the MQTT client takes none from the URL), and the run logged
// the password with the URL ("simulator running"), as /readyz showed it.
func TestSimulatorRefusesABrokerURLWithUserInfo(t *testing.T) {
	t.Setenv("TFLO_SIMULATOR_MQTT_URL", "mqtt://sim:s3cret@127.0.0.1:1")
	errOut := printConfig(t, worker.ExitUsage)
	require.Contains(t, errOut, "simulator config: mqtt.url: broker URL mqtt://sim:xxxxx@127.0.0.1:1 carries user info, which is not used: set mqtt.username and mqtt.password_env")
	require.NotContains(t, errOut, "s3cret")
}

// printConfig runs the simulator with --print-config, its printout to
// /dev/null, requires exit code want and returns what it wrote to stderr.
func printConfig(t *testing.T, want int) string {
	t.Helper()
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer devnull.Close()
	stdout := os.Stdout
	os.Stdout = devnull
	defer func() { os.Stdout = stdout }()
	var errOut bytes.Buffer
	require.Equal(t, want, worker.RunMain(Main(), []string{"--print-config"}, &errOut), "%s", &errOut)
	return errOut.String()
}
