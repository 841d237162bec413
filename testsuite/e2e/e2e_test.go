package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/portal"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
	"github.com/tflo-io/tflo/testsuite/toolbin"
	"github.com/tflo-io/tflo/workers/simulator"
	"github.com/tflo-io/tflo/workflows"
)

// tee records every payload the simulator published, in order, and
// keeps the simulator at most window messages ahead of the edge, as a
// paced fleet is: mochi-mqtt v2.7.9 deadlocks when a subscriber's receive
// quota runs out (Inflight.NextImmediate read-locks twice while a
// publisher waits to write), so the test stays far from the edge's
// receive maximum however slow the race detector makes the edge.
type tee struct {
	mu       sync.Mutex
	payloads [][]byte
	stack    atomic.Pointer[portal.Stack]
}

const window = 128

func (r *tee) Publish(ctx context.Context, _ string, p []byte) error {
	r.mu.Lock()
	r.payloads = append(r.payloads, append([]byte(nil), p...))
	n := len(r.payloads)
	r.mu.Unlock()
	st := r.stack.Load()
	for {
		s := st.Stats()
		if int(s.EdgeReadings+s.EdgeDLQ)+window >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond): // poll interval of the flow control
		}
	}
}

type sigKey struct {
	sensor string
	ts     int64
}

type outKey struct {
	sensor, signal string
	ts             int64 // ns
}

type outVal struct {
	mode  string
	value float64
}

// dlqCollector subscribes to the MQTT dead-letter topic and keeps every
// payload with its reason.
type dlqCollector struct {
	mu      sync.Mutex
	reasons map[string]string // payload → reason
	cm      *autopaho.ConnectionManager
	cancel  context.CancelFunc
	once    sync.Once
}

// close disconnects (before the broker stops: a client reconnecting into
// a closing mochi broker keeps its listener from closing). Idempotent.
func (d *dlqCollector) close() {
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.cm.Disconnect(ctx)
		d.cancel()
	})
}

// collectDLQ connects a dlqCollector to the broker at url; it is closed
// at the test's end, whichever way the test ends, unless closed before.
func collectDLQ(t *testing.T, ctx context.Context, url string) *dlqCollector {
	t.Helper()
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	d := &dlqCollector{reasons: map[string]string{}, cancel: cancel}
	cm, err := autopaho.NewConnection(cctx, autopaho.ClientConfig{
		ServerUrls: []*neturl.URL{u}, KeepAlive: 20, CleanStartOnInitialConnection: true,
		ConnectPacketBuilder: func(c *paho.Connect, _ *neturl.URL) (*paho.Connect, error) {
			if c.Properties == nil {
				c.Properties = &paho.ConnectProperties{}
			}
			c.Properties.RequestProblemInfo = true
			return c, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			_, _ = cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: portal.SensorsDLQTopic, QoS: 1}}})
		},
		ClientConfig: paho.ClientConfig{ClientID: "e2e-dlq", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				reason := ""
				if pr.Packet.Properties != nil {
					reason = pr.Packet.Properties.User.Get(mqtt.PropReason)
				}
				d.mu.Lock()
				d.reasons[string(pr.Packet.Payload)] = reason
				d.mu.Unlock()
				return true, nil
			}}},
	})
	require.NoError(t, err)
	d.cm = cm
	t.Cleanup(d.close)
	require.NoError(t, cm.AwaitConnection(ctx))
	return d
}

// TestDLQCollectorClosedWhenTheTestEndsEarly: TestPortalEndToEnd closed
// its collector with a defer registered only once the stack had started,
// so when the stack failed to start after BeforeSimulator made the
// collector, nothing closed it (only the test's context, cancelled
// without waiting, stopped it: its goroutines outlived the test). It is
// closed when the test that made it ends, whatever the context.
func TestDLQCollectorClosedWhenTheTestEndsEarly(t *testing.T) {
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	var d *dlqCollector
	t.Run("ends early", func(t *testing.T) {
		d = collectDLQ(t, context.Background(), b.URL())
		t.SkipNow() // leaves as a failed require does: before any close
	})
	select {
	case <-d.cm.Done():
	default:
		t.Fatal("the dead-letter collector is still running after its test ended")
	}
}

// brokerInfo is what the embedded MQTT broker counted that tells a
// message it lost (dropped on a full client queue or store) from one a
// client never took.
func brokerInfo(b *devstack.MQTT) string {
	i := b.Info()
	return fmt.Sprintf("{received:%d sent:%d dropped:%d inflight:%d inflight_dropped:%d clients_connected:%d clients_total:%d}",
		i.MessagesReceived, i.MessagesSent, i.MessagesDropped, i.Inflight, i.InflightDropped, i.ClientsConnected, i.ClientsTotal)
}

// logFile keeps the workers' log in a file in the test's temporary
// directory, so that a failure can show what they said (the stack
// discards it by default).
type logFile struct {
	path   string
	logger *slog.Logger
}

func newLogFile(t *testing.T) *logFile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workers.log")
	f, err := os.Create(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return &logFile{path: path, logger: slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))}
}

// tail returns about the last n bytes of the log.
func (l *logFile) tail(n int) string {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

func (d *dlqCollector) snapshot() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]string, len(d.reasons))
	for k, v := range d.reasons {
		out[k] = v
	}
	return out
}

// TestPortalEndToEnd runs the demo's topology — the pipeline workers of
// iot-portal's specs — for a fixed, seeded fleet and checks every leg
// against the portal's recorded results for that fleet (the golden file
// the hand-wired portal wrote before it became specs): each valid reading
// was conditioned by the edge and exactly the recorded signal envelopes
// reached Kafka, byte for byte; the recorded derived outputs are in
// InfluxDB and in the Parquet archive; each malformed
// payload is on the dead-letter topic with a reason; every shard's
// checkpoints completed and are listed through the visibility API by
// their search attributes; and a BackfillWorkflow replaying the archive
// into a fresh database reproduces the same points.
func TestPortalEndToEnd(t *testing.T) {
	toolbin.RequireStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &tee{}
	var dlq *dlqCollector
	simCfg := simulator.Config{Sensors: 8, Rounds: 250, Interval: 100 * time.Millisecond, Start: start,
		AnomalyEvery: 40, AnomalyLength: 10, Malformed: 0.03, Seed: 42}
	workerLog := newLogFile(t)
	st, err := portal.StartStack(ctx, portal.StackOptions{
		Dir: t.TempDir(), Simulator: simCfg, CheckpointInterval: time.Second, Headless: true, Tee: rec, Log: workerLog.logger,
		// Archive files finish at almost every record, so compaction has
		// many small files to merge.
		ArchiveMaxFileAge: time.Millisecond,
		BeforeSimulator: func(s *portal.Stack) error {
			rec.stack.Store(s)
			dlq = collectDLQ(t, ctx, s.MQTT.URL())
			return nil
		},
	})
	require.NoError(t, err)
	defer st.Close()
	defer dlq.close() // before the stack's broker stops
	// A failure shows the dev server's own errors (it logs at error level):
	// its side of an error the test got from it.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("temporal dev server log tail:\n%s", st.Temporal.LogTail(16<<10))
			t.Logf("workers' log tail:\n%s", workerLog.tail(32<<10))
		}
	})

	// The fleet published its rounds; split what it sent.
	select {
	case <-st.SimulatorDone():
	case <-ctx.Done():
		t.Fatal("simulator did not finish")
	}
	require.NoError(t, st.SimulatorErr())
	var valid []mqtt.Reading
	var malformed []string
	for _, p := range rec.payloads {
		if r, err := mqtt.DecodeReading(p); err == nil {
			valid = append(valid, r)
		} else {
			malformed = append(malformed, string(p))
		}
	}
	sim := st.Simulator.Stats()
	require.Equal(t, int(sim.Readings), len(valid), "the simulator's valid readings decode, its malformed ones do not")
	require.Equal(t, int(sim.Malformed), len(malformed))
	require.Equal(t, simCfg.Sensors*simCfg.Rounds, len(rec.payloads))
	require.NotEmpty(t, malformed)

	// Edge: every valid reading applied, every malformed one dead-lettered.
	require.Eventually(t, func() bool {
		s := st.Stats()
		return s.EdgeReadings == uint64(len(valid)) && s.EdgeDLQ == uint64(len(malformed))
	}, time.Minute, 20*time.Millisecond, "edge stats %+v, want %d readings and %d dead letters; broker %s",
		st.Stats(), len(valid), len(malformed), brokerInfo(st.MQTT))

	// The expected signals and derived outputs: iot-portal's results for
	// this very fleet, recorded before the portal became pipeline specs
	// (workers/pipelines/testdata; the specs reproduce them offline in
	// TestIoTPortalOutputsAreUnchanged, this checks the running system).
	wantSig, want := golden(t)
	require.GreaterOrEqual(t, len(wantSig), 10, "the seeded fleet should raise and clear alarms")

	// Kafka holds exactly those signals, byte for byte.
	gotSig := readSignals(t, ctx, st.Kafka.Addrs(), len(wantSig))
	require.Len(t, gotSig, len(wantSig))
	for k, w := range wantSig {
		g, ok := gotSig[k]
		require.True(t, ok, "signal %v missing from Kafka", k)
		require.Equal(t, w, g, "signal %v", k)
	}

	// Central: every signal applied.
	require.Eventually(t, func() bool { return st.Stats().CentralIn == uint64(len(wantSig)) }, time.Minute, 20*time.Millisecond,
		"central applied %d of %d signals", st.Stats().CentralIn, len(wantSig))
	require.Zero(t, st.Stats().CentralDLQ)
	cp, err := st.CentralPipeline(0)
	require.NoError(t, err)
	measurements := cp.Graph.Outputs

	// Dead letters carry their reasons.
	require.Eventually(t, func() bool { return len(dlq.snapshot()) == len(malformed) }, 30*time.Second, 20*time.Millisecond)
	reasons := dlq.snapshot()
	for _, m := range malformed {
		require.Contains(t, reasons, m)
		require.NotEmpty(t, reasons[m], "dead letter %q has no reason", m)
	}

	// The pipeline's checkpoint coordinator is listed by its search
	// attributes, and its rounds checkpointed every shard.
	q := fmt.Sprintf("%s = '%s'", workflows.SearchPipeline.GetName(), portal.PipelineName)
	var attrs map[string]string
	require.Eventually(t, func() bool {
		resp, err := st.Temporal.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q})
		if err != nil || len(resp.Executions) != 1 || resp.Executions[0].GetExecution().GetWorkflowId() != workflows.CoordinatorWorkflowID(portal.PipelineName) {
			return false
		}
		attrs = map[string]string{}
		for name, p := range resp.Executions[0].GetSearchAttributes().GetIndexedFields() {
			var v any
			if converter.GetDefaultDataConverter().FromPayload(p, &v) == nil {
				attrs[name] = fmt.Sprint(v)
			}
		}
		return attrs[workflows.SearchBreakerState.GetName()] != ""
	}, time.Minute, 200*time.Millisecond, "visibility: %s", q)
	require.Equal(t, workflows.BreakerClosed, attrs[workflows.SearchBreakerState.GetName()])
	// A round checkpointed shard of pipeline name.
	checkpointedByRound := func(name string, shard streaming.ShardID) {
		t.Helper()
		var row workflows.ShardRow
		require.Eventually(t, func() bool {
			var rows []workflows.ShardRow
			v, err := st.Temporal.Client.QueryWorkflow(ctx, workflows.CoordinatorWorkflowID(name), "", workflows.QueryShards)
			if err != nil || v.Get(&rows) != nil {
				return false
			}
			for _, r := range rows {
				if r.Shard == shard {
					row = r
				}
			}
			return row.Status == workflows.ShardOK && row.Round > 0 && row.CheckpointID > 0
		}, time.Minute, 200*time.Millisecond, "no round of %s checkpointed shard %s: %+v", name, shard, row)
	}
	for _, shard := range st.Shards() {
		checkpointedByRound(portal.PipelineName, shard)
	}
	// So did the edge's pipeline's own coordinator, for the edge's one
	// shard: its MQTT client id.
	ep, err := st.EdgePipeline()
	require.NoError(t, err)
	ep = ep.WithDefaults()
	checkpointedByRound(ep.Name, streaming.ShardID(ep.Source.(*pipeline.MQTTSource).ClientID))

	// Drain: final checkpoints flush the sinks.
	require.NoError(t, st.StopWorkers())

	got := influxPoints(t, ctx, st.Influx, portal.Database, measurements)
	requireSameOutputs(t, want, got, "InfluxDB")

	env, err := cp.SinkEnv(nil)
	require.NoError(t, err)
	// The archive is on the stack's S3 server.
	require.True(t, strings.HasPrefix(st.Archive, "s3://"), "archive %s", st.Archive)
	loc, err := archiveloc.Parse(st.Archive)
	require.NoError(t, err)
	arc, err := archiveloc.Open(ctx, loc, st.ArchiveS3)
	require.NoError(t, err)
	archived, rows := archivedOutputs(t, ctx, arc, portal.PipelineName, st.Opts.Partitions, env)
	requireSameOutputs(t, want, archived, "the Parquet archive")
	// Every row once, for any reader (not only ours).
	indep := archivetest.ReadIndependently(t, arc, "")
	require.Empty(t, archivetest.Duplicates(indep))
	require.Len(t, indep, rows)
	require.Len(t, indep, len(want))

	// Backfill the archive into a fresh database: the same points, from
	// S3 and then from the same archive compacted.
	backfill := func(name, db string) int64 {
		t.Helper()
		in := workflows.BackfillInput{Name: name, Location: st.Archive, Sink: worker.InfluxSinkName(portal.Bucket(db))}
		run, err := st.Temporal.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID(in.Name), TaskQueue: workflows.ControlTaskQueue},
			workflows.BackfillWorkflow, in)
		require.NoError(t, err)
		var prog workflows.BackfillProgress
		require.NoError(t, run.Get(ctx, &prog))
		require.True(t, prog.Done)
		return prog.RowsDone
	}
	// (The backfill worker creates the database.)
	require.Equal(t, int64(rows), backfill("e2e", "iot_portal_replay"))
	requireSameOutputs(t, got, influxPoints(t, ctx, st.Influx, "iot_portal_replay", measurements), "the database backfilled from S3")

	pol := parquet.DefaultCompactPolicy()
	pol.MinAge = 0
	res, err := parquet.Compact(ctx, arc, "", "", pol, time.Now())
	require.NoError(t, err)
	require.NotEmpty(t, res.Runs, "compaction found no small files to merge (%d files)", res.Files)
	after := archivetest.ReadIndependently(t, arc, "")
	require.Empty(t, archivetest.Duplicates(after))
	require.Len(t, after, len(want))
	require.Less(t, countFiles(after), countFiles(indep), "compaction merged no files")
	t.Logf("archive: %d rows in %d files, %d after compaction", len(indep), countFiles(indep), countFiles(after))
	require.Equal(t, int64(rows), backfill("e2e-compacted", "iot_portal_compacted"))
	requireSameOutputs(t, got, influxPoints(t, ctx, st.Influx, "iot_portal_compacted", measurements), "the database backfilled from the compacted archive")

	dlq.close()
	require.NoError(t, st.Close())
}

// archivedOutputs reads every row the archive la holds for the
// first parts shards of pipeline name, by output, modes named by env; rows
// counts them (a row written twice counts twice).
func archivedOutputs(t *testing.T, ctx context.Context, la parquet.Archive, name string, parts int32, env pipeline.SinkEnv) (map[outKey]outVal, int) {
	t.Helper()
	out := map[outKey]outVal{}
	rows := 0
	for p := range parts {
		r, err := parquet.NewReader(la, parquet.ShardPrefix(name, p), parquet.WithExpectedFingerprint(parquet.SchemaFingerprint()))
		require.NoError(t, err)
		for e, err := range r.All(ctx, parquet.Position{}) {
			require.NoError(t, err)
			v := outVal{value: e.Row.Value}
			if name, ok := env.Modes(e.Row.Signal, streaming.Mode(e.Row.Mode)); ok {
				v.mode = name
			}
			out[outKey{e.Row.Sensor, e.Row.Signal, e.Row.TS}] = v
			rows++
		}
	}
	return out, rows
}

// readSignals consumes the signals topic from the start until n signals
// arrived, and returns each envelope's bytes by sensor and time.
func readSignals(t *testing.T, ctx context.Context, addrs []string, n int) map[sigKey]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(portal.SignalsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	out := map[sigKey]string{}
	total := 0
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for total < n {
		fs := cl.PollFetches(pctx)
		require.NoError(t, pctx.Err(), "read %d of %d signals", total, n)
		fs.EachRecord(func(r *kgo.Record) {
			sig, _, err := kafka.DecodeSignal[string, json.RawMessage](r.Value)
			require.NoError(t, err)
			require.Equal(t, sig.Key, string(r.Key), "signals are keyed by sensor")
			out[sigKey{sig.Key, sig.TS}] = string(r.Value)
			total++
		})
	}
	require.Equal(t, n, total, "no signal twice")
	return out
}

// golden reads the recorded results of the e2e fleet: each signal
// envelope by sensor and time, and each derived output.
func golden(t *testing.T) (map[sigKey]string, map[outKey]outVal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "workers", "pipelines", "testdata", "iot-portal-e2e.golden"))
	require.NoError(t, err)
	sigs, outs := map[sigKey]string{}, map[outKey]outVal{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if env, ok := strings.CutPrefix(line, "signal "); ok {
			sig, _, err := kafka.DecodeSignal[string, json.RawMessage]([]byte(env))
			require.NoError(t, err)
			sigs[sigKey{sig.Key, sig.TS}] = env
			continue
		}
		f := strings.Fields(line)
		require.Len(t, f, 6, "golden line %q", line)
		ts, err := strconv.ParseInt(f[3], 10, 64)
		require.NoError(t, err)
		mode, err := strconv.Unquote(f[4])
		require.NoError(t, err)
		v, err := strconv.ParseFloat(f[5], 64)
		require.NoError(t, err)
		outs[outKey{f[1], f[2], ts}] = outVal{mode: mode, value: v}
	}
	return sigs, outs
}

// influxPoints reads every point of the measurements of db.
func influxPoints(t *testing.T, ctx context.Context, s *devstack.Influx, db string, measurements []string) map[outKey]outVal {
	t.Helper()
	pts, err := s.Points(ctx, db, measurements)
	require.NoError(t, err)
	out := make(map[outKey]outVal, len(pts))
	for k, v := range pts {
		out[outKey{k.Sensor, k.Measurement, k.TS}] = outVal{mode: v.Mode, value: v.Value}
	}
	return out
}

func requireSameOutputs(t *testing.T, want, got map[outKey]outVal, where string) {
	t.Helper()
	var missing, wrong []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprint(k))
		case g.mode != w.mode || math.Abs(g.value-w.value) > 1e-9*math.Max(1, math.Abs(w.value)):
			wrong = append(wrong, fmt.Sprintf("%v: got %+v want %+v", k, g, w))
		}
	}
	sort.Strings(missing)
	sort.Strings(wrong)
	require.Empty(t, missing, "outputs missing from %s (%d of %d)", where, len(missing), len(want))
	require.Empty(t, wrong, "outputs differing in %s", where)
	require.Len(t, got, len(want), "%s holds outputs no reference run produced", where)
}

func countFiles(rows []archivetest.FileRow) int {
	files := map[string]bool{}
	for _, r := range rows {
		files[r.File] = true
	}
	return len(files)
}
