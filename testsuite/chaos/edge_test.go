package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/testsuite/mosquittotest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

const (
	signalsTopic = "signals" // the edge spec's sink topic
	kills        = 3
)

var (
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

// repoRoot is the module root.
func repoRoot(testing.TB) string { return toolbin.Root() }

// TestMain removes the worker binary buildWorker built (about 70 MB).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binDir holds the worker binary; removed by TestMain.
var binDir string

// buildWorker builds workers/cmd/worker once per test binary.
func buildWorker(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tflo-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		workerBin = filepath.Join(dir, "worker")
		buildErr = toolbin.GoBuild(dir, "", "./workers/cmd/worker")
	})
	require.NoError(t, buildErr)
	return workerBin
}

func seed(t testing.TB) uint64 {
	if s := os.Getenv("TFLO_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "TFLO_CHAOS_SEED")
		return v
	}
	return uint64(time.Now().UnixNano())
}

// edgeReadings are the publisher's readings, rounds of one reading per
// sensor: every sensor swings across the edge graph's hysteresis band
// (24/30), so signals are frequent and each one's smoothed value depends
// on the five readings before it.
func edgeReadings(sensors, rounds int) []mqtt.Reading {
	var rs []mqtt.Reading
	for seq := 1; seq <= rounds; seq++ {
		for s := range sensors {
			v := 27 + 6.5*math.Sin(float64(seq)/4+float64(s))
			rs = append(rs, mqtt.Reading{Sensor: fmt.Sprintf("dev%d", s), TS: 1_700_000_000_000 + int64(seq)*1000, Value: math.Round(v*1000) / 1000})
		}
	}
	return rs
}

// edgeRun is one edge worker process at a time over one state folder,
// MQTT session and Kafka cluster.
type edgeRun struct {
	t      testing.TB
	bin    string
	env    []string
	cmd    *exec.Cmd
	exited chan struct{}
	sub    chan struct{} // closed when the current process logs its subscription
}

func newEdgeRun(t testing.TB, bin, mqttURL string, brokers []string, clientID string, mochi bool) *edgeRun {
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"MQTT_URL=" + mqttURL, "KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STATE_DIR=" + t.TempDir(), "EDGE_ID=" + clientID,
		"TFLO_WORKER_ID=" + clientID,
	}
	if mochi {
		// mochi-mqtt v2.7.9's flow control deadlocks (see
		// pipeline.MQTTSource.OmitReceiveMaximum).
		env = append(env, "TFLO_SOURCE_MQTT_OMIT_RECEIVE_MAXIMUM=true")
	}
	return &edgeRun{t: t, bin: bin, env: env}
}

// start starts a process on the run's state.
func (e *edgeRun) start() {
	t := e.t
	spec := filepath.Join(repoRoot(t), "workers", "pipelines", "iot-portal-edge.yaml")
	cmd := exec.Command(e.bin, "--pipeline", spec)
	cmd.Env = e.env
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	e.cmd, e.exited, e.sub = cmd, make(chan struct{}), make(chan struct{})
	sub, exited := e.sub, e.exited
	go func() {
		once := sync.Once{}
		readLines(stderr, func(line string) {
			if strings.Contains(line, "mqtt subscribed") {
				once.Do(func() { close(sub) })
			}
			if strings.Contains(line, "level=ERROR") || os.Getenv("TFLO_TEST_LOG") != "" {
				t.Logf("edge: %s", line)
			}
		})
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
}

// readLines calls line with each line r yields (without its newline),
// however long, until r ends or fails. It reads r to its end: a reader
// that stopped early (bufio.Scanner at a line over 64 KiB) would leave the
// worker blocked writing its stderr once the pipe is full.
func readLines(r io.Reader, line func(string)) {
	br := bufio.NewReader(r)
	for {
		l, err := br.ReadString('\n')
		if l != "" {
			line(strings.TrimSuffix(l, "\n"))
		}
		if err != nil {
			return
		}
	}
}

func (e *edgeRun) waitSubscribed() {
	select {
	case <-e.sub:
	case <-e.exited:
		e.t.Fatal("the edge exited before it subscribed")
	case <-time.After(60 * time.Second):
		e.t.Fatal("the edge did not subscribe within 60s")
	}
}

// kill SIGKILLs the process and waits for it.
func (e *edgeRun) kill() {
	require.NoError(e.t, e.cmd.Process.Signal(syscall.SIGKILL))
	<-e.exited
}

// stop SIGTERMs the process (drain, final checkpoint) and waits for a
// clean exit.
func (e *edgeRun) stop() {
	require.NoError(e.t, e.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-e.exited:
	case <-time.After(60 * time.Second):
		e.t.Fatal("the edge did not stop within 60s of SIGTERM")
	}
	require.True(e.t, e.cmd.ProcessState.Success(), "the edge exited with %v", e.cmd.ProcessState)
}

// endReadings are published after the readings: sensor "end" goes high,
// then drops to clear. Its "cleared" signal on Kafka says the edge has
// applied everything published before (the broker delivers in order).
func endReadings() []mqtt.Reading { return markerReadings("end", 1_700_000_000_000) }

// markerReadings: sensor goes high, then drops to clear, from ts0 on.
func markerReadings(sensor string, ts0 int64) []mqtt.Reading {
	var rs []mqtt.Reading
	for i, v := range []float64{40, 40, 40, 40, 40, 10, 10, 10, 10, 10} {
		rs = append(rs, mqtt.Reading{Sensor: sensor, TS: ts0 + int64(i+1)*1000, Value: v})
	}
	return rs
}

// waitEnd waits until the end sensor's cleared signal is on the topic.
func waitEnd(t testing.TB, brokers []string) { waitCleared(t, brokers, "end") }

// waitCleared waits until sensor's cleared signal is on the topic.
func waitCleared(t testing.TB, brokers []string, sensor string) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, _ := readSignals(t, brokers)
		for s := range got {
			if s.Key == sensor && s.Mode == "cleared" {
				return true
			}
		}
		return false
	}, 2*time.Minute, 100*time.Millisecond, "the edge never applied the readings of marker sensor %q", sensor)
}

// probeTS is after every reading the tests publish before the probe.
const probeTS = 1_700_100_000_000

// probeReadings read the edge's state back through its effects: after a
// restart (the restore path) every sensor gets a reading far above the
// hysteresis band, then two far below it. Whatever mode a sensor was in,
// this emits at least one signal, and each one's smoothed value is the
// mean of the sensor's restored SMA window with the probe: a restored
// window, mode or last level that differs from the crash-free run's gives
// a different signal, or none.
func probeReadings(rs []mqtt.Reading) []mqtt.Reading {
	var sensors []string
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.Sensor] {
			seen[r.Sensor] = true
			sensors = append(sensors, r.Sensor)
		}
	}
	var probe []mqtt.Reading
	for i, v := range []float64{1000, -1000, -1000} {
		for _, s := range sensors {
			probe = append(probe, mqtt.Reading{Sensor: s, TS: probeTS + int64(i+1)*1000, Value: v})
		}
	}
	return append(probe, markerReadings("probe-end", probeTS)...)
}

// probeState restarts the stopped edge of run e on its state, publishes
// the probe, waits until the edge has applied it, stops it and returns
// the probe's signals (none of the marker's).
func probeState(ctx context.Context, t testing.TB, e *edgeRun, addr string, brokers []string, probe []mqtt.Reading) map[signal]bool {
	t.Helper()
	e.start()
	e.waitSubscribed()
	require.NoError(t, publish(ctx, addr, probe, 1, 0))
	waitCleared(t, brokers, "probe-end")
	e.stop()
	got, _ := readSignals(t, brokers)
	out := map[signal]bool{}
	for s := range got {
		if s.TS > probeTS && s.Key != "probe-end" {
			out[s] = true
		}
	}
	return out
}

// publish publishes readings with QoS 2, each PUBLISH completed
// (PUBCOMP) before the next, and waits gap after every every readings.
func publish(ctx context.Context, addr string, rs []mqtt.Reading, every int, gap time.Duration) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: "chaos-publisher"})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "chaos-publisher", CleanStart: true, KeepAlive: 30}); err != nil {
		return err
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
	for i, r := range rs {
		if _, err := c.Publish(ctx, &paho.Publish{Topic: "sensors/" + r.Sensor, QoS: 2, Payload: mqtt.EncodeReading(nil, r)}); err != nil {
			return fmt.Errorf("publish %s@%d: %w", r.Sensor, r.TS, err)
		}
		if gap > 0 && (i+1)%every == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(gap): // pacing the publisher, not synchronising
			}
		}
	}
	return nil
}

// signal is one signal envelope's content.
type signal struct {
	Key, Mode, Topic string
	TS               int64
	Smoothed, Raw    float64
}

// readSignals returns the distinct signals on the topic and how many
// records repeated one.
func readSignals(t testing.TB, brokers []string) (map[signal]bool, int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(signalsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ends := endOffsets(t, brokers)
	got := map[signal]bool{}
	dups := 0
	read := map[int32]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := func() bool {
		for p, end := range ends {
			if read[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading the signals topic")
		fs.EachRecord(func(r *kgo.Record) {
			type payload struct {
				Smoothed float64 `json:"smoothed"`
				Raw      float64 `json:"raw"`
				Topic    string  `json:"topic"`
			}
			sig, _, err := kafka.DecodeSignal[string, payload](r.Value)
			require.NoError(t, err)
			s := signal{Key: sig.Key, Mode: sig.Mode, Topic: sig.Payload.Topic, TS: sig.TS, Smoothed: sig.Payload.Smoothed, Raw: sig.Payload.Raw}
			if got[s] {
				dups++
			}
			got[s] = true
			read[r.Partition] = r.Offset + 1
		})
	}
	return got, dups
}

// endOffsets are the topic's partitions' end offsets now.
func endOffsets(t testing.TB, brokers []string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, signalsTopic)
	require.NoError(t, err)
	ends := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		ends[o.Partition] = o.Offset
	})
	return ends
}

func newKafka(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, signalsTopic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func diff(want, got map[signal]bool) (missing, extra []signal) {
	for s := range want {
		if !got[s] {
			missing = append(missing, s)
		}
	}
	for s := range got {
		if !want[s] {
			extra = append(extra, s)
		}
	}
	return missing, extra
}

// TestEdgeSIGKILLExactlyOnce: the shipped edge (worker binary, edge spec)
// is killed with SIGKILL three times at seeded random points while a QoS
// 2 publisher runs. Bug: the edge acknowledged each QoS 2 message when it
// handled it (ack_on_checkpoint was off in the spec and by default), so
// the readings applied after the last checkpoint were gone after a kill:
// the broker did not redeliver them and the restored state lacked them,
// and the signals computed from them were missing or different. Now every
// reading is applied exactly once: the distinct signals on Kafka equal a
// crash-free run's, and so does the edge's state as its last checkpoint
// restores it (probeReadings: both restored edges answer a probe alike).
//
// On mochi-mqtt v2.7.9 the publisher sends one reading per sensor per
// second: mochi resends a session's in-flight messages ordered only by
// the second they were published (Inflight.GetAll sorts by
// uint16(Created), Unix seconds; within a second, map order), against
// MQTT's ordering rule (MQTT-4.6.0-1), so after a kill two readings of a
// sensor published in one second could come back swapped and its moving
// average differ for a reason that is not the edge's. Mosquitto keeps
// the order, and there the publisher runs flat out (8 sensors × 300).
func TestEdgeSIGKILLExactlyOnce(t *testing.T) {
	bin := buildWorker(t)
	for _, broker := range []string{"mochi", "mosquitto"} {
		t.Run(broker, func(t *testing.T) {
			var addr, url string
			var rs []mqtt.Reading
			every, gap := 1, 2*time.Millisecond // pace: gap after every readings
			killAfter := func(r *rand.Rand) time.Duration { return time.Duration(300+r.IntN(1200)) * time.Millisecond }
			switch broker {
			case "mochi":
				b := mqttbrokertest.Start(t, mqttbroker.Options{})
				addr, url = b.Addr(), b.URL()
				const sensors = 48
				rs, every, gap = edgeReadings(sensors, 30), sensors, 1010*time.Millisecond
				killAfter = func(r *rand.Rand) time.Duration { return time.Duration(2000+r.IntN(6000)) * time.Millisecond }
			case "mosquitto":
				b := mosquittotest.Start(t)
				addr, url = b.Addr(), b.URL()
				rs = edgeReadings(8, 300)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()

			// The crash-free run.
			refKafka := newKafka(t)
			ref := newEdgeRun(t, bin, url, refKafka, "edge-ref", broker == "mochi")
			ref.start()
			ref.waitSubscribed()
			require.NoError(t, publish(ctx, addr, append(rs, endReadings()...), 1, 0))
			waitEnd(t, refKafka)
			ref.stop()
			want, _ := readSignals(t, refKafka)
			require.Greater(t, len(want), 50, "too few signals to tell a lost or repeated reading")
			// Its state read back through the restore path, now: once the
			// run with kills has a session on the broker, the probe would
			// be queued for it too.
			probe := probeReadings(rs)
			wantProbe := probeState(ctx, t, ref, addr, refKafka, probe)
			sensors := (len(probe) - len(markerReadings("", 0))) / 3
			require.GreaterOrEqual(t, len(wantProbe), sensors, "the probe emitted fewer signals than sensors on the crash-free run's state")

			// The run with kills.
			sd := seed(t)
			t.Logf("seed %d (TFLO_CHAOS_SEED replays it)", sd)
			rnd := rand.New(rand.NewPCG(sd, sd))
			kafkaAddrs := newKafka(t)
			e := newEdgeRun(t, bin, url, kafkaAddrs, "edge-kill", broker == "mochi")
			e.start()
			e.waitSubscribed()
			pubDone := make(chan error, 1)
			go func() { pubDone <- publish(ctx, addr, rs, every, gap) }()
			for i := range kills {
				at := killAfter(rnd)
				select {
				case <-time.After(at): // the fault's random point, not a wait for a condition
				case <-e.exited:
					t.Fatalf("the edge exited on its own before kill %d", i+1)
				}
				e.kill()
				t.Logf("kill %d: %s after start", i+1, at)
				e.start()
			}
			require.NoError(t, <-pubDone)
			require.NoError(t, publish(ctx, addr, endReadings(), 1, 0))
			waitEnd(t, kafkaAddrs)
			e.stop()
			got, dups := readSignals(t, kafkaAddrs)
			missing, extra := diff(want, got)
			t.Logf("want %d distinct signals, got %d (%d duplicates): %d missing, %d extra", len(want), len(got), dups, len(missing), len(extra))
			require.Empty(t, missing, "signals of the crash-free run missing after the kills (a reading lost)")
			require.Empty(t, extra, "signals the crash-free run does not produce (a reading lost or applied twice)")
			t.Logf("%d readings, %d distinct signals equal to the crash-free run's; %d replayed duplicates on Kafka (at-least-once sink)", len(rs), len(got), dups)

			// The edge's state: both edges restored from their last
			// checkpoint answer the same probe alike.
			gotProbe := probeState(ctx, t, e, addr, kafkaAddrs, probe)
			missing, extra = diff(wantProbe, gotProbe)
			require.Empty(t, missing, "probe signals of the crash-free run's restored state missing: the restored edge state differs")
			require.Empty(t, extra, "probe signals the crash-free run's restored state does not give: the restored edge state differs")
			t.Logf("edge state: the probe gave the same %d signals on both restored states (%d sensors)", len(gotProbe), sensors)
		})
	}
}
