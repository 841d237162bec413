package portal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/devstack"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/workers/edge"
	"github.com/tflo-io/tflo/workers/simulator"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestRunMainUsage(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		code     int
		contains []string
	}{
		{"help lists every key with its variable", []string{"--help"}, nil, ExitOK,
			[]string{"kafka.brokers", "TFLO_KAFKA_BROKERS", "mqtt.dlq_topic", "TFLO_MQTT_DLQ_TOPIC", "TFLO_METRICS_ADDR"}},
		{"unknown flag", []string{"--nope"}, nil, ExitUsage, []string{"nope"}},
		{"stray argument", []string{"extra"}, nil, ExitUsage, []string{"unexpected arguments"}},
		{"unknown key in the file", []string{"--config", "BADFILE"}, nil, ExitUsage, []string{"kafak"}},
		{"invalid config names every problem", nil, nil, ExitUsage, []string{"mqtt.servers is empty", "kafka.brokers is empty", "state.dir is empty"}},
		{"bad environment value names the variable", nil, map[string]string{"TFLO_GRAPH_SMA_WINDOW": "five"}, ExitUsage, []string{"TFLO_GRAPH_SMA_WINDOW"}},
		{"dead letters must not loop back", nil, map[string]string{"TFLO_MQTT_SERVERS": "mqtt://x:1", "TFLO_KAFKA_BROKERS": "k:1", "TFLO_STATE_DIR": "/tmp/x", "TFLO_MQTT_DLQ_TOPIC": "sensors/dlq"}, ExitUsage, []string{`matches the subscription "sensors/#"`}},
	}
	bad := writeFile(t, "kafak:\n  brokers: [x:1]\n")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			for i, a := range c.args {
				if a == "BADFILE" {
					c.args[i] = bad
				}
			}
			var errOut bytes.Buffer
			code := RunMain(EdgeMain(), c.args, &errOut)
			require.Equal(t, c.code, code, errOut.String())
			for _, s := range c.contains {
				require.Contains(t, errOut.String(), s)
			}
		})
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func metric(t *testing.T, url, name string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestEdgeMainDrainsOnSIGTERM runs the edge main against a real broker
// and Kafka: readings show on /metrics, SIGTERM stops it with exit 0 and
// the final checkpoint is in the Badger folder with the MQTT cursor.
func TestEdgeMainDrainsOnSIGTERM(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "signals", Partitions: 2})
	require.NoError(t, err)
	defer k.Close()
	b, err := devstack.StartMQTT(nil)
	require.NoError(t, err)
	defer b.Close()
	state := filepath.Join(t.TempDir(), "edge")
	maddr := freePort(t)
	path := writeFile(t, fmt.Sprintf("gateway_id: gw\nmqtt:\n  servers: [%s]\nkafka:\n  brokers: [%s]\nstate:\n  dir: %s\nmetrics:\n  addr: %q\n",
		b.URL(), k.Addrs()[0], state, maddr))
	t.Setenv("TFLO_CHECKPOINT_INTERVAL", "1h") // only the final checkpoint

	done := make(chan int, 1)
	go func() { done <- RunMain(EdgeMain(), []string{"--config", path}, io.Discard) }()
	url := "http://" + maddr + "/metrics"
	require.Eventually(t, func() bool { return metric(t, url, "tflo_edge_mqtt_received_total") == 0 }, 30*time.Second, 20*time.Millisecond)
	resp, err := http.Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Regexp(t, `(?m)^tflo_build_info\{go_version="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`, string(body), "the worker says which build it runs")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sim, err := simulator.New(simulator.Config{Sensors: 3, Rounds: 10, Start: time.Unix(1_700_000_000, 0), AnomalyEvery: -1, Malformed: 0.001})
	require.NoError(t, err)
	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL()})
	require.NoError(t, err)
	require.NoError(t, sim.Run(ctx, pub))
	require.NoError(t, pub.Close(ctx))
	n := float64(sim.Stats().Readings)
	require.Eventually(t, func() bool { return metric(t, url, "tflo_edge_records_in_total") == n }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 0.0, metric(t, url, "tflo_edge_checkpoint_breaker_state"), "breaker closed")
	require.Greater(t, metric(t, url, "tflo_edge_event_lag_seconds"), float64(time.Since(time.Unix(1_700_000_000, 0))/time.Second)-60,
		"event lag follows the readings' time")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, ExitOK, code)
	case <-time.After(30 * time.Second):
		t.Fatal("edge main did not stop on SIGTERM")
	}
	st, err := badgerstore.Open(badgerstore.WithPath(state))
	require.NoError(t, err)
	defer st.Close()
	rec, err := st.LoadCursor(ctx, []byte("edge/gw"))
	require.NoError(t, err, "the final checkpoint saved the cursor")
	require.NotEmpty(t, rec.Cursor)
}

// TestSimulatorMainRunsItsRounds: the simulator main publishes its rounds
// to a real broker (seen by a subscriber) and exits 0 by itself.
func TestSimulatorMainRunsItsRounds(t *testing.T) {
	b, err := devstack.StartMQTT(nil)
	require.NoError(t, err)
	defer b.Close()
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
	t.Setenv("TFLO_MQTT_URL", b.URL())
	t.Setenv("TFLO_SENSORS", "2")
	t.Setenv("TFLO_ROUNDS", "5")
	t.Setenv("TFLO_MALFORMED", "0.000001")
	var errOut bytes.Buffer
	require.Equal(t, ExitOK, RunMain(SimulatorMain(), nil, &errOut), errOut.String())
	require.Eventually(t, func() bool { return len(got) == 10 }, 10*time.Second, 10*time.Millisecond)
}

// TestCentralMainDrainsOnSIGTERM runs the central main (no Temporal:
// in-process checkpoints) on the edge's signals in a real Kafka
// protocol, with a shared durable folder: records show on /metrics, an
// undecodable record is dead-lettered, SIGTERM exits 0 after the final
// checkpoints, which are in the durable folder.
func TestCentralMainDrainsOnSIGTERM(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "signals", Partitions: 2}, devstack.KafkaTopic{Name: "signals.dlq", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	dir := t.TempDir()
	maddr := freePort(t)
	for k, v := range map[string]string{
		"TFLO_WORKER_ID": "c1", "TFLO_KAFKA_BROKERS": k.Addrs()[0], "TFLO_KAFKA_TOPIC": "signals", "TFLO_KAFKA_INPUT": "signals",
		"TFLO_KAFKA_SESSION_TIMEOUT": "2s", "TFLO_STATE_DIR": filepath.Join(dir, "badger"), "TFLO_DURABLE_DIR": filepath.Join(dir, "durable"),
		"TFLO_ARCHIVE_DIR": filepath.Join(dir, "archive"), "TFLO_GRAPH_WINDOW": "2", "TFLO_CHECKPOINT_INTERVAL": "1h", "TFLO_METRICS_ADDR": maddr,
	} {
		t.Setenv(k, v)
	}
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() { done <- RunMain(CentralMain(), nil, &errOut) }()
	url := "http://" + maddr + "/metrics"
	require.Eventually(t, func() bool { return metric(t, url, "tflo_central_owned_partitions") == 2 }, 30*time.Second, 20*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("signals", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	const n = 20
	for i := range n {
		sig := edge.Signal{Key: fmt.Sprintf("s%d", i%4), TS: int64(1000 + i), Mode: edge.Raised, Payload: edge.Payload{Smoothed: float64(20 + i)}}
		require.NoError(t, kafka.PublishSignal(ctx, pub, sig, nil, 0))
	}
	require.NoError(t, pub.Publish(ctx, "s0", []byte("not an envelope")))
	require.NoError(t, pub.Flush(ctx))
	require.Eventually(t, func() bool {
		return metric(t, url, "tflo_central_records_in_total") == n && metric(t, url, "tflo_central_dlq_total") == 1
	}, 30*time.Second, 20*time.Millisecond)

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, ExitOK, code, errOut.String())
	case <-time.After(60 * time.Second):
		t.Fatal("central main did not stop on SIGTERM")
	}
	ents, err := os.ReadDir(filepath.Join(dir, "durable"))
	require.NoError(t, err)
	require.NotEmpty(t, ents, "final checkpoints in the durable folder")
	arch, err := os.ReadDir(filepath.Join(dir, "archive"))
	require.NoError(t, err)
	require.NotEmpty(t, arch, "archive flushed at shutdown")
}
