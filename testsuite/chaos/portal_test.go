package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/influxtest"
)

const (
	centralGroup = "tflo-central" // the central spec's group
	centralParts = 4
)

var centralMeasurements = []string{"mean", "min", "max", "alarm_episode"}

// centralInput is the central pipeline's input: the edge's signal
// envelopes, per sensor a smoothed value swinging across the alarm band
// (25/28), so episodes open and close.
func centralInput(sensors, per int) []*kgo.Record {
	type payload struct {
		Smoothed float64 `json:"smoothed"`
		Raw      float64 `json:"raw"`
		Topic    string  `json:"topic"`
	}
	var recs []*kgo.Record
	for seq := 1; seq <= per; seq++ {
		for s := range sensors {
			key := fmt.Sprintf("dev%02d", s)
			v := math.Round((26.5+4*math.Sin(float64(seq)/3+float64(s)))*1000) / 1000
			mode := "raised"
			if seq%2 == 0 {
				mode = "cleared"
			}
			b, err := kafka.EncodeSignal(streaming.Signal[string, payload]{Key: key, TS: 1_700_000_000_000 + int64(seq)*1000, Mode: mode,
				Payload: payload{Smoothed: v, Raw: v, Topic: "sensors/" + key}}, nil, 0)
			if err != nil {
				panic(err)
			}
			recs = append(recs, &kgo.Record{Topic: signalsTopic, Key: []byte(key), Value: b})
		}
	}
	return recs
}

// central is one central worker process.
type central struct {
	t      testing.TB
	bin    string
	env    []string
	spec   string
	cmd    *exec.Cmd
	exited chan struct{}
}

func (c *central) start() {
	t := c.t
	cmd := exec.Command(c.bin, "--pipeline", c.spec)
	cmd.Env = c.env
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	c.cmd, c.exited = cmd, exited
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if os.Getenv("TFLO_TEST_LOG") != "" {
				t.Logf("%s: %s", c.env[len(c.env)-1], sc.Text())
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
}

func (c *central) signal(sig syscall.Signal) { _ = c.cmd.Process.Signal(sig) }

func (c *central) wait(t testing.TB) {
	select {
	case <-c.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a central worker did not exit within 60s")
	}
}

// portalRun is the central workers of one run: their Kafka cluster, their
// InfluxDB database and shared durable folder.
type portalRun struct {
	brokers []string
	db      string
	workers []*central
}

func newPortalRun(t testing.TB, bin string, influx *influxtest.Server, db string, workers int) *portalRun {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(centralParts, signalsTopic, signalsTopic+".dlq"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	influx.CreateDatabase(t, db)
	shipped, err := os.ReadFile(filepath.Join(repoRoot(t), "workers", "pipelines", "iot-portal-central.yaml"))
	require.NoError(t, err)
	spec := strings.Replace(string(shipped), "bucket: iot_portal/autogen", "bucket: "+db+"/autogen", 1)
	require.NotEqual(t, string(shipped), spec, "the central spec's bucket moved")
	path := filepath.Join(t.TempDir(), "central.yaml")
	require.NoError(t, os.WriteFile(path, []byte(spec), 0o600))
	r := &portalRun{brokers: c.ListenAddrs(), db: db}
	durable := t.TempDir()
	for i := range workers {
		id := fmt.Sprintf("central-%d", i+1)
		r.workers = append(r.workers, &central{t: t, bin: bin, spec: path, env: []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
			"KAFKA_BROKERS=" + strings.Join(r.brokers, ","), "INFLUX_URL=" + influx.URL,
			"ARCHIVE_DIR=" + t.TempDir(), "STATE_DIR=" + t.TempDir(), "TFLO_STATE_DURABLE_DIR=" + durable,
			"TFLO_CHECKPOINT_INTERVAL=1s", "TFLO_WORKER_ID=" + id,
		}})
	}
	return r
}

func (r *portalRun) produce(recs []*kgo.Record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// lag is the group's committed lag on the signals topic (-1 when it
// cannot be read).
func (r *portalRun) lag() int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...))
	if err != nil {
		return -1
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, signalsTopic)
	if err != nil {
		return -1
	}
	committed, err := adm.FetchOffsets(ctx, centralGroup)
	if err != nil {
		return -1
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(signalsTopic, o.Partition)
		if !ok {
			lag += o.Offset
			return
		}
		lag += max(o.Offset-c.At, 0)
	})
	return lag
}

// waitCaughtUp waits for committed lag 0: every record checkpointed, so
// every output is in InfluxDB.
func (r *portalRun) waitCaughtUp(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.Eventually(t, func() bool { return r.lag() == 0 }, within, 100*time.Millisecond, "committed lag did not return to 0 within %s", within)
	return time.Since(start)
}

// TestPortalFaults is the short fault matrix of the iot-portal's central
// workers as separate processes (two workers sharing a durable folder,
// kfake, a real influxd): a SIGKILL of a central worker mid-stream (it is
// restarted at once), then influxd stopped for 20s. After each, committed
// lag returns to 0 (its seconds are the recovery), and at the end every
// InfluxDB point equals a crash-free run's: 0 missing, 0 differing. It
// prints the fault table. Seeded (TFLO_CHAOS_SEED replays a run).
func TestPortalFaults(t *testing.T) {
	influx := influxtest.Start(t)
	bin := buildWorker(t)
	ref := newPortalRun(t, bin, influx, "ref", 1)
	ref.workers[0].start()
	require.NoError(t, ref.produce(centralInput(16, 60)))
	ref.waitCaughtUp(t, 90*time.Second)
	ref.workers[0].signal(syscall.SIGTERM)
	ref.workers[0].wait(t)
	ctx := context.Background()
	want, err := influx.Influx().Points(ctx, ref.db, centralMeasurements)
	require.NoError(t, err)
	require.NotEmpty(t, want)

	sd := seed(t)
	t.Logf("seed %d (TFLO_CHAOS_SEED replays it)", sd)
	rnd := rand.New(rand.NewPCG(sd, sd))
	run := newPortalRun(t, bin, influx, "faults", 2)
	for _, w := range run.workers {
		w.start()
	}
	// The input (fresh records: a produced kgo.Record keeps its context)
	// in three parts: the first around the kill, the second during the
	// InfluxDB outage, the last after it; each paced in batches.
	input := centralInput(16, 60)
	third := len(input) / 3
	parts := [][]*kgo.Record{input[:third], input[third : 2*third], input[2*third:]}
	paced := func(recs []*kgo.Record, over time.Duration) chan error {
		done := make(chan error, 1)
		const batches = 20
		per := (len(recs) + batches - 1) / batches
		go func() {
			for i := 0; i < len(recs); i += per {
				if err := run.produce(recs[i:min(i+per, len(recs))]); err != nil {
					done <- err
					return
				}
				time.Sleep(over / batches) // pacing the input, not synchronising
			}
			done <- nil
		}()
		return done
	}
	type row struct {
		fault    string
		at       time.Duration
		recovery time.Duration
	}
	var table []row
	began := time.Now()

	// Fault 1: SIGKILL of a central worker at a random point of the first
	// part, restarted at once.
	produced := paced(parts[0], 5*time.Second)
	time.Sleep(time.Duration(1000+rnd.IntN(3000)) * time.Millisecond) // the fault's random point, not a wait for a condition
	victim := run.workers[rnd.IntN(len(run.workers))]
	victim.signal(syscall.SIGKILL)
	victim.wait(t)
	killedAt := time.Now()
	victim.start()
	kill := row{fault: "SIGKILL " + strings.TrimPrefix(victim.env[len(victim.env)-1], "TFLO_WORKER_ID="), at: killedAt.Sub(began)}
	require.NoError(t, <-produced)
	run.waitCaughtUp(t, 60*time.Second)
	kill.recovery = time.Since(killedAt)
	table = append(table, kill)

	// Fault 2: influxd stopped for 20s while the second part arrives.
	stop := row{fault: "influxd stopped 20s", at: time.Since(began)}
	influx.Stop()
	produced = paced(parts[1], 15*time.Second)
	time.Sleep(20 * time.Second) // the outage's length, not synchronisation
	influx.Restart(t)
	restartedAt := time.Now()
	require.NoError(t, <-produced)
	run.waitCaughtUp(t, 90*time.Second)
	stop.recovery = time.Since(restartedAt)
	table = append(table, stop)

	require.NoError(t, <-paced(parts[2], time.Second))
	run.waitCaughtUp(t, 60*time.Second)
	for _, w := range run.workers {
		w.signal(syscall.SIGTERM)
	}
	for _, w := range run.workers {
		w.wait(t)
	}
	got, err := influx.Influx().Points(ctx, run.db, centralMeasurements)
	require.NoError(t, err)
	var missing, differing int
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case g != v:
			differing++
		}
	}
	extra := 0
	for k := range got {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-34s %8s %10s %8s %10s\n", "fault", "at (s)", "recov (s)", "missing", "differing")
	// recov: from the kill, or from influxd's restart, to committed lag 0.
	for _, r := range table {
		fmt.Fprintf(&b, "%-34s %8.1f %10.1f %8s %10s\n", r.fault, r.at.Seconds(), r.recovery.Seconds(), "-", "-")
	}
	fmt.Fprintf(&b, "%-34s %8s %10s %8d %10d   (%d points, %d extra)\n", "end of run vs crash-free", "", "", missing, differing, len(want), extra)
	t.Log(b.String())
	require.Zero(t, missing, "points of the crash-free run missing")
	require.Zero(t, differing, "points that differ from the crash-free run")
	require.Zero(t, extra, "points the crash-free run does not have")
}
