package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/influxtest"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// temporalPipeline is alarmPipeline as the Temporal tests run it: short
// sessions, checkpoints every second through the workflows, a durable
// store shared by the workers.
func temporalPipeline(addrs []string, durable streaming.StateStore, sinks ...pipeline.SinkSpec) pipeline.Pipeline {
	p := alarmPipeline(addrs, "", sinks...)
	p.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 3 * time.Second, RevokeTimeout: 5 * time.Second}
	p.State.Durable = pipeline.Durable{Store: durable}
	p.Checkpoint = pipeline.Checkpoint{Interval: time.Second, HeartbeatTimeout: 2 * time.Second, HandoffStepTimeout: 5 * time.Second, StageTimeout: 5 * time.Second}
	return p
}

// withKafkaOptions returns p with its Kafka source's client given opts (a
// dialer the test can cut, shorter retries).
func withKafkaOptions(p pipeline.Pipeline, opts ...kgo.Opt) pipeline.Pipeline {
	ks := p.Source.(pipeline.KafkaSource)
	ks.ClientOptions = opts
	p.Source = ks
	return p
}

func heldShards(w *pipeline.Worker) []streaming.ShardID {
	var out []streaming.ShardID
	for _, s := range w.Shards() {
		out = append(out, s.Shard)
	}
	return out
}

func allShards(parts int) []streaming.ShardID {
	var out []streaming.ShardID
	for p := range parts {
		out = append(out, streaming.KafkaShard(topic, int32(p)))
	}
	return out
}

// queryShard returns the coordinator's table row of shard (QueryShards).
func queryShard(ctx context.Context, c client.Client, pipelineName string, shard streaming.ShardID) (workflows.ShardRow, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var rows []workflows.ShardRow
	v, err := c.QueryWorkflow(qctx, workflows.CoordinatorWorkflowID(pipelineName), "", workflows.QueryShards)
	if err == nil {
		err = v.Get(&rows)
	}
	if err != nil {
		return workflows.ShardRow{}, err
	}
	for _, r := range rows {
		if r.Shard == shard {
			return r, nil
		}
	}
	return workflows.ShardRow{}, fmt.Errorf("the coordinator of %s has no row for shard %s", pipelineName, shard)
}

// queryCoordinator returns the coordinator's status (QueryStatus).
func queryCoordinator(ctx context.Context, c client.Client, pipelineName string) (workflows.CoordinatorStatus, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var st workflows.CoordinatorStatus
	v, err := c.QueryWorkflow(qctx, workflows.CoordinatorWorkflowID(pipelineName), "", workflows.QueryStatus)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// epochOf returns the epoch at which w holds shard (0: not held).
func epochOf(w *pipeline.Worker, shard streaming.ShardID) streaming.Epoch {
	for _, s := range w.Shards() {
		if s.Shard == shard {
			return s.Epoch
		}
	}
	return 0
}

func endOffsets(t testing.TB, addrs []string, parts int32) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[int32]int64{}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset - 1 })
	require.Len(t, out, int(parts))
	return out
}

// gather sums a metric family over its series (histograms: the sample
// count).
// gatherWith is gather of the series whose label has value.
func gatherWith(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

func gather(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	return 0
}

func pendingActivities(d *client.WorkflowExecutionDescription) any {
	if d == nil || d.RawResponse == nil {
		return nil
	}
	return d.RawResponse.GetPendingActivities()
}

// waitHandoff waits for the latest run of handoff id to complete with the
// shard on worker, failing with the saga's state and pending activities.
func waitHandoff(ctx context.Context, t *testing.T, c client.Client, id, worker string, hs *workflows.HandoffState) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var err error
	for time.Now().Before(deadline) {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.GetWorkflow(gctx, id, "").Get(gctx, hs)
		cancel()
		if err == nil && hs.To != nil && hs.To.WorkerID == worker {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	var st workflows.HandoffState
	v, qerr := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if qerr == nil {
		qerr = v.Get(&st)
	}
	desc, derr := c.DescribeWorkflow(ctx, id, "")
	t.Fatalf("handoff %s never completed on %s: last get error %v, result %+v; status %+v (query error %v); pending activities %v (describe error %v)",
		id, worker, err, *hs, st, qerr, pendingActivities(desc), derr)
}

// lastHeartbeat returns the held shards in the last heartbeat of the
// lease workflow's pending activity.
func lastHeartbeat(ctx context.Context, t *testing.T, c client.Client, id string) []activities.HeldShard {
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil || d.RawResponse == nil {
		return nil
	}
	for _, pa := range d.RawResponse.GetPendingActivities() {
		if pa.GetActivityType().GetName() != "KeepLeases" || pa.GetHeartbeatDetails() == nil {
			continue
		}
		var held []activities.HeldShard
		if err := converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &held); err != nil {
			t.Logf("heartbeat details: %v", err)
			return nil
		}
		return held
	}
	return nil
}

func subset(sub, of []streaming.ShardID) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}

// dialThrough connects a Temporal client to srv through link, which the
// test can cut; the client is closed when the test ends.
func dialThrough(t testing.TB, srv *temporaltest.Server, link *faults.Net) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:          srv.HostPort,
		Logger:            tlog.NewStructuredLogger(testLogger(t)),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithContextDialer(link.GRPCDial)}},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// cutStore is a StateStore whose writes fail once cut: a dead process
// writes nothing more.
type cutStore struct {
	streaming.StateStore
	mu  sync.Mutex
	cut bool
}

var errStoreCut = errors.New("state store unreachable: cut by test")

func (s *cutStore) Cut() {
	s.mu.Lock()
	s.cut = true
	s.mu.Unlock()
}

func (s *cutStore) isCut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

func (s *cutStore) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	if s.isCut() {
		return errStoreCut
	}
	return s.StateStore.Save(ctx, key, snap)
}

func (s *cutStore) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if s.isCut() {
		return errStoreCut
	}
	return s.StateStore.SaveBatch(ctx, items)
}

func (s *cutStore) Delete(ctx context.Context, key []byte) error {
	if s.isCut() {
		return errStoreCut
	}
	return s.StateStore.Delete(ctx, key)
}

func (s *cutStore) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if s.isCut() {
		return streaming.Snapshot{}, errStoreCut
	}
	return s.StateStore.Load(ctx, key)
}

// TestCheckpointsThroughCoordinator: a worker consuming from kfake runs
// its checkpoints through the pipeline's checkpoint coordinator on a real
// Temporal dev server (its first announcement starts it). The per-shard
// table (QueryShards) shows each shard owned by the worker and
// checkpointed by a round at the partition's last offset; the coordinator
// is found through the visibility API (ListWorkflow filtered on
// TfloPipeline, the breaker attribute read back) and shows its last round
// as current details; the outputs reach the sinks, InfluxDB and the
// Parquet archive exactly as an uninterrupted run computes them; a
// graceful stop ends the lease workflow as "stopped".
func TestCheckpointsThroughCoordinator(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 3
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()

	influxd := influxtest.Start(t)
	influxd.CreateDatabase(t, "plant")
	archive := t.TempDir()
	rec := newRecorder()
	p := temporalPipeline(addrs, memory.New(), rec.shared(),
		pipeline.InfluxSink{URL: influxd.URL, Bucket: "plant/autogen"}, pipeline.ArchiveSink{Dir: archive})
	reg := prometheus.NewRegistry()
	w := start(t, p, pipeline.WithWorkerID("solo"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker(), pipeline.WithMetrics(reg))

	rs := makeReadings(12, 1, 60)
	produce(t, addrs, rs)
	want := reference(t, p, rs)
	require.Eventually(t, func() bool { return rec.has(want) }, 30*time.Second, 20*time.Millisecond)
	// The records' counter moves after their outputs are written.
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == uint64(len(rs)) }, 10*time.Second, 5*time.Millisecond,
		"records in: %d, want %d", w.w.Stats().RecordsIn, len(rs))
	rec.requireExact(t, want)

	ends := endOffsets(t, addrs, parts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for part := int32(0); part < parts; part++ {
		shard := streaming.KafkaShard(topic, part)
		var row workflows.ShardRow
		var qerr error
		require.Positive(t, ends[part], "partition %d got no readings; use more sensors", part)
		require.Eventually(t, func() bool {
			row, qerr = queryShard(ctx, srv.Client, p.Name, shard)
			return qerr == nil && row.Status == workflows.ShardOK && strings.HasSuffix(row.Cursor, fmt.Sprintf("@%d", ends[part]))
		}, time.Minute, 100*time.Millisecond, "shard %s: no round checkpointed it at offset %d (last row %+v, query error %v)", shard, ends[part], row, qerr)
		require.Equal(t, "solo", row.Owner.WorkerID)
		require.Equal(t, workflows.WorkerTaskQueue("solo"), row.Owner.TaskQueue)
		require.Equal(t, epochOf(w.w, shard), row.Owner.Epoch)
		require.Positive(t, row.Round)
		require.Positive(t, row.CheckpointID)
		require.Positive(t, row.Bytes)
		require.Contains(t, row.Cursor, string(shard))
		require.Empty(t, row.Handoff, "a first owner needs no handoff")
	}
	st, err := queryCoordinator(ctx, srv.Client, p.Name)
	require.NoError(t, err)
	require.Equal(t, workflows.BreakerClosed, st.Breaker)
	require.Positive(t, st.Complete)
	require.Len(t, st.Workers, 1)
	require.Equal(t, "solo", st.Workers[0].WorkerID)
	require.Equal(t, parts, st.Workers[0].Shards)
	require.NotNil(t, st.Last)
	require.Equal(t, parts, st.Last.Shards)
	// The announcements and the lease workflow (whose worker-gone notice
	// the coordinator ignores when it names an earlier run) name the same
	// run of the worker.
	require.NotEmpty(t, st.Workers[0].Instance)
	var lease workflows.LeaseInput
	started := temporaltest.History(t, ctx, srv.Client, workflows.LeaseWorkflowID("solo"), "")[0].GetWorkflowExecutionStartedEventAttributes()
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(started.GetInput(), &lease))
	require.Equal(t, st.Workers[0].Instance, lease.Instance)

	query := fmt.Sprintf("TfloPipeline = %q", p.Name)
	var attrs map[string]string
	require.Eventually(t, func() bool {
		resp, err := srv.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil || len(resp.Executions) != 1 {
			return false
		}
		attrs = map[string]string{}
		for name, pl := range resp.Executions[0].GetSearchAttributes().GetIndexedFields() {
			var s any
			if converter.GetDefaultDataConverter().FromPayload(pl, &s) == nil {
				attrs[name] = fmt.Sprint(s)
			}
		}
		return resp.Executions[0].Execution.WorkflowId == workflows.CoordinatorWorkflowID(p.Name)
	}, time.Minute, 200*time.Millisecond, "visibility: %s", query)
	require.Equal(t, p.Name, attrs["TfloPipeline"])
	require.Equal(t, workflows.BreakerClosed, attrs["TfloBreakerState"])
	desc, err := srv.Client.DescribeWorkflow(ctx, workflows.CoordinatorWorkflowID(p.Name), "")
	require.NoError(t, err)
	summary, err := desc.GetStaticSummary()
	require.NoError(t, err)
	require.Contains(t, summary, "checkpoint coordinator of "+p.Name)
	v, err := srv.Client.QueryWorkflow(ctx, workflows.CoordinatorWorkflowID(p.Name), "", "__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	require.True(t, strings.HasPrefix(md.GetCurrentDetails(), "round "), "current details: %q", md.GetCurrentDetails())

	// The metrics saw the records, their outputs and the checkpoints.
	require.Equal(t, float64(len(rs)), gather(t, reg, "tflo_pipeline_records_in_total"))
	require.Equal(t, float64(len(want)), gather(t, reg, "tflo_pipeline_records_out_total"))
	require.Equal(t, float64(parts), gather(t, reg, "tflo_pipeline_owned_shards"))
	require.Eventually(t, func() bool { return gather(t, reg, "tflo_pipeline_checkpoints_total") >= parts }, 10*time.Second, 50*time.Millisecond)
	require.Positive(t, gather(t, reg, "tflo_pipeline_checkpoint_duration_seconds"))
	require.Equal(t, float64(parts), gather(t, reg, "tflo_pipeline_checkpoint_breaker_state"), "one series per state, 1 for each shard's current one")
	require.Zero(t, gatherWith(t, reg, "tflo_pipeline_checkpoint_breaker_state", "state", "open"), "no breaker open")
	require.Positive(t, gather(t, reg, "tflo_pipeline_state_memory_bytes"))
	require.Positive(t, gather(t, reg, "tflo_pipeline_state_budget_bytes"))
	require.Positive(t, gather(t, reg, "tflo_pipeline_state_cache_capacity_keys"))
	require.Equal(t, 12.0, gather(t, reg, "tflo_pipeline_state_keys"), "one key a sensor")
	require.Equal(t, float64(len(rs)), gather(t, reg, "tflo_pipeline_state_cache_hits_total")+gather(t, reg, "tflo_pipeline_state_cache_misses_total"),
		"every record applied looked its key up once")
	require.Equal(t, 12.0, gather(t, reg, "tflo_pipeline_state_cache_misses_total"), "the cache holds every key: one miss a key, its first record")

	// Graceful stop: final checkpoints, archive flushed, lease stopped.
	w.stop(t)
	var ls workflows.LeaseState
	require.NoError(t, srv.Client.GetWorkflow(ctx, workflows.LeaseWorkflowID("solo"), "").Get(ctx, &ls))
	if ls.Status != workflows.LeaseStopped {
		for _, ev := range temporaltest.History(t, ctx, srv.Client, workflows.LeaseWorkflowID("solo"), "") {
			t.Logf("lease history: %s %s %v", ev.GetEventTime().AsTime().Format("15:04:05.000"), ev.GetEventType(), ev.GetAttributes())
		}
	}
	require.Equal(t, workflows.LeaseStopped, ls.Status)

	// Influx holds one point per output (the final checkpoints flushed
	// the sink before the stop returned).
	perName := map[string]int{}
	for k := range want {
		perName[k.name]++
	}
	for _, name := range p.Graph.Outputs {
		require.Equal(t, perName[name], influxd.Count(t, "plant", name), "influx points of %s", name)
	}
	require.Positive(t, perName["alarm_episode"], "the readings opened no alarm episode")

	la, err := parquet.NewLocalArchive(archive)
	require.NoError(t, err)
	archived := map[outKey]outVal{}
	for part := int32(0); part < parts; part++ {
		r, err := parquet.NewReader(la, parquet.ShardPrefix(p.Name, part), parquet.WithExpectedFingerprint(parquet.SchemaFingerprint()))
		require.NoError(t, err)
		for e, err := range r.All(ctx, parquet.Position{}) {
			require.NoError(t, err)
			archived[outKey{e.Row.Sensor, e.Row.Signal, e.Row.TS}] = outVal{mode: streaming.Mode(e.Row.Mode), value: e.Row.Value}
		}
	}
	require.Equal(t, want, archived)
}

// TestRebalanceHandoffVerifiesFinalCheckpoint: a second worker joins; the
// group moves some partitions to it cooperatively, the first worker takes
// their final checkpoints in its revoke callback, the second announces
// them to the coordinator, which starts the handoff of each moved shard:
// its final checkpoint is a one-worker round on the old owner (which
// answers with that revoke checkpoint), restored on the new owner.
func TestRebalanceHandoffVerifiesFinalCheckpoint(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	durable := memory.New()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := temporalPipeline(addrs, durable)

	a := start(t, p, pipeline.WithWorkerID("first"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker())
	require.Eventually(t, func() bool { return len(a.w.Shards()) == parts }, 30*time.Second, 20*time.Millisecond)
	for _, shard := range allShards(parts) {
		require.Eventually(t, func() bool {
			row, err := queryShard(ctx, srv.Client, p.Name, shard)
			return err == nil && row.Owner.WorkerID == "first"
		}, time.Minute, 50*time.Millisecond, "shard %s: first owner never announced", shard)
	}
	produce(t, addrs, makeReadings(16, 1, 20))
	require.Eventually(t, func() bool { return a.w.Stats().RecordsIn == 16*20 }, 30*time.Second, 20*time.Millisecond)

	b := start(t, p, pipeline.WithWorkerID("second"), pipeline.WithTemporal(srv.Client))
	require.Eventually(t, func() bool {
		na, nb := len(a.w.Shards()), len(b.w.Shards())
		return na > 0 && nb > 0 && na+nb == parts
	}, 30*time.Second, 20*time.Millisecond)

	for _, shard := range heldShards(b.w) {
		var hs workflows.HandoffState
		waitHandoff(ctx, t, srv.Client, workflows.HandoffWorkflowIDAt(p.Name, shard, epochOf(b.w, shard)), "second", &hs)
		require.NotNil(t, hs.From, "handoff of %s does not name the first owner", shard)
		require.Equal(t, "first", hs.From.WorkerID)
		require.NotNil(t, hs.FinalCheckpoint, "handoff of %s: final checkpoint skipped: %s", shard, hs.FinalCheckpointSkipped)
		require.NotNil(t, hs.Restored)
		require.Equal(t, hs.FinalCheckpoint.CheckpointID, hs.Restored.CheckpointID,
			"the new owner restored another checkpoint than the old owner's final one")
		require.Equal(t, hs.FinalCheckpoint.Cursor, hs.Restored.Cursor)
		require.NotEmpty(t, hs.Restored.Cursor)
		row, err := queryShard(ctx, srv.Client, p.Name, shard)
		require.NoError(t, err)
		require.Equal(t, "second", row.Owner.WorkerID)
		require.Contains(t, row.Handoff, "first@")
	}
}

// TestBreakerGaugeShowsTheCoordinators: the only checkpoint breaker is
// the coordinator's (issue 13 §3; there used to be a second one in
// process, and the gauge showed that one). With the durable store failing,
// rounds fail on storage, the coordinator's breaker opens after its
// threshold, and every held shard's tflo_pipeline_checkpoint_breaker_state
// shows it open (2); once the store is back the half-open probe round closes it and the gauge
// follows.
func TestBreakerGaugeShowsTheCoordinators(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 2
	c := newCluster(t, parts)
	store := &cutStore{StateStore: memory.New()}
	p := temporalPipeline(c.ListenAddrs(), store)
	p.Checkpoint.BreakerThreshold = 2
	p.Checkpoint.BreakerCoolDown = 3 * time.Second
	reg := prometheus.NewRegistry()
	start(t, p, pipeline.WithWorkerID("solo"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker(), pipeline.WithMetrics(reg))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.Eventually(t, func() bool {
		st, err := queryCoordinator(ctx, srv.Client, p.Name)
		return err == nil && st.Complete > 0
	}, time.Minute, 50*time.Millisecond, "no complete round")
	open := func() float64 { return gatherWith(t, reg, "tflo_pipeline_checkpoint_breaker_state", "state", "open") }
	closed := func() float64 { return gatherWith(t, reg, "tflo_pipeline_checkpoint_breaker_state", "state", "closed") }
	require.Zero(t, open())
	require.Equal(t, float64(parts), closed(), "every shard's breaker series says closed")

	store.Cut()
	require.Eventually(t, func() bool {
		st, err := queryCoordinator(ctx, srv.Client, p.Name)
		return err == nil && st.Breaker == workflows.BreakerOpen
	}, time.Minute, 50*time.Millisecond, "the coordinator's breaker never opened")
	require.Eventually(t, func() bool { return open() == parts && closed() == 0 },
		30*time.Second, 20*time.Millisecond, "the gauge does not show the coordinator's open breaker")

	store.mu.Lock()
	store.cut = false
	store.mu.Unlock()
	require.Eventually(t, func() bool {
		st, err := queryCoordinator(ctx, srv.Client, p.Name)
		return err == nil && st.Breaker == workflows.BreakerClosed
	}, time.Minute, 50*time.Millisecond, "the probe round did not close the breaker")
	require.Eventually(t, func() bool { return open() == 0 && closed() == parts },
		30*time.Second, 20*time.Millisecond, "the gauge does not follow the closed breaker")
}

// TestMQTTCheckpointsThroughCoordinator: an MQTT source's shard (its
// client id) is a held shard like a Kafka partition: the worker announces
// it to the pipeline's checkpoint coordinator on a real Temporal dev
// server, whose rounds checkpoint it (the shard table shows it owned by
// the worker, on its queue, checkpointed by a round), so its checkpoints
// show in the web UI with the others; a graceful stop takes the final
// checkpoint and releases it.
func TestMQTTCheckpointsThroughCoordinator(t *testing.T) {
	srv := temporaltest.Start(t)
	e := newEdgeEnv(t)
	p := e.pipeline(false, 200*time.Millisecond)
	g := start(t, p, pipeline.WithWorkerID("edge-gw-1"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker())
	require.Eventually(t, func() bool { return g.w.Stats().Subscribed }, waitFor, time.Millisecond)
	for i := range 20 {
		payload := mqtt.EncodeReading(nil, mqtt.Reading{Sensor: fmt.Sprintf("s-%d", i%4), TS: int64(i), Value: float64(18 + i)})
		require.NoError(t, e.broker.Publish(fmt.Sprintf("sensors/s-%d", i%4), payload, false, 2))
	}
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == 20 }, waitFor, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const shard = streaming.ShardID("edge-gw-1")
	var row workflows.ShardRow
	var qerr error
	require.Eventually(t, func() bool {
		row, qerr = queryShard(ctx, srv.Client, p.Name, shard)
		return qerr == nil && row.Status == workflows.ShardOK && row.Round > 0 && row.CheckpointID > 0
	}, time.Minute, 50*time.Millisecond, "shard %s: no round checkpointed it (last row %+v, query error %v)", shard, row, qerr)
	require.Equal(t, "edge-gw-1", row.Owner.WorkerID)
	require.Equal(t, workflows.WorkerTaskQueue("edge-gw-1"), row.Owner.TaskQueue)
	st, err := queryCoordinator(ctx, srv.Client, p.Name)
	require.NoError(t, err)
	require.Len(t, st.Workers, 1)
	require.Equal(t, 1, st.Workers[0].Shards)
	require.Positive(t, st.Complete, "complete rounds")
	require.NotNil(t, st.Last)
	require.Equal(t, 1, st.Last.Shards)
	require.GreaterOrEqual(t, g.w.Shards()[0].Checkpoint.LastID, streaming.CheckpointID(row.CheckpointID))
}

// TestStoppedWorkerAnnouncesItsReleases: a worker's control plane stopped
// as soon as its source had stopped, so the partitions its stop revoked
// (each after its final checkpoint) were announced as released only when
// the announcement happened to go out during the drain: the others stayed
// the stopped worker's in the coordinator's table, as checkpointed fine,
// and its rounds kept addressing them to a queue no one polled. Every
// release is announced before Run returns.
func TestStoppedWorkerAnnouncesItsReleases(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 4
	kc := newCluster(t, parts)
	// The workflows run on a control worker that outlives the pipeline
	// worker.
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(ctl)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := temporalPipeline(kc.ListenAddrs(), memory.New())
	w := start(t, p, pipeline.WithWorkerID("solo"), pipeline.WithTemporal(srv.Client))
	for _, shard := range allShards(parts) {
		require.Eventually(t, func() bool {
			row, err := queryShard(ctx, srv.Client, p.Name, shard)
			return err == nil && row.Owner.WorkerID == "solo" && row.Status == workflows.ShardOK
		}, time.Minute, 50*time.Millisecond, "shard %s announced and checkpointed by a round", shard)
	}
	w.stop(t)
	for _, shard := range allShards(parts) {
		row, err := queryShard(ctx, srv.Client, p.Name, shard)
		require.NoError(t, err)
		require.Equal(t, workflows.ShardReleased, row.Status, "shard %s of the stopped worker: %+v", shard, row)
	}
}
