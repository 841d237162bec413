package central

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/influxtest"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("TFLO_CENTRAL_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// started is a worker running in a goroutine.
type started struct {
	w      *Worker
	cancel context.CancelFunc
	done   chan error
}

func startWorker(t testing.TB, cfg Config, opts ...Option) *started {
	t.Helper()
	w, err := New(cfg, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- w.Run(ctx) }()
	return s
}

// stop cancels the worker (graceful shutdown) and waits for Run.
func (s *started) stop(t testing.TB) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		require.NoError(t, err)
		s.done <- nil
	case <-time.After(60 * time.Second):
		t.Fatal("central worker did not stop within 60s")
	}
}

func baseConfig(t testing.TB, id string, addrs []string, temporalAddr string) Config {
	cfg := DefaultConfig()
	cfg.WorkerID = id
	cfg.Pipeline = "plant"
	cfg.Kafka.Brokers = addrs
	cfg.Kafka.Topic = topic
	cfg.Kafka.DLQTopic = topic + ".dlq"
	cfg.Kafka.SessionTimeout = Duration(3 * time.Second)
	cfg.Kafka.RevokeTimeout = Duration(5 * time.Second)
	cfg.Graph.Window = 5
	cfg.State.Dir = t.TempDir()
	cfg.Temporal.Address = temporalAddr
	cfg.Checkpoint.Interval = Duration(time.Second)
	cfg.Checkpoint.HeartbeatTimeout = Duration(2 * time.Second)
	cfg.Checkpoint.HandoffStepTimeout = Duration(5 * time.Second)
	cfg.Checkpoint.StageTimeout = Duration(5 * time.Second)
	return cfg
}

func queryCheckpoint(ctx context.Context, c client.Client, pipeline string, shard streaming.ShardID) (workflows.CheckpointState, error) {
	var st workflows.CheckpointState
	v, err := c.QueryWorkflow(ctx, workflows.CheckpointWorkflowID(pipeline, shard), "", workflows.QueryStatus)
	if err != nil {
		return st, err
	}
	return st, v.Get(&st)
}

// endOffsets returns the last offset of every partition of the topic.
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

// TestCheckpointsThroughWorkflow: a central worker consuming from kfake
// runs its checkpoints through the CheckpointWorkflow on a real Temporal
// dev server. Each shard's checkpoint shows up through the visibility API
// (ListWorkflow filtered on TfloPipeline and TfloShard, with the search
// attributes read back) and through the status query, whose cursor is
// the partition's last offset; the derived signals reach the sinks and
// the Parquet archive exactly as an uninterrupted run computes them; a
// graceful stop ends the lease workflow as "stopped".
func TestCheckpointsThroughWorkflow(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 3
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()

	influxd := influxtest.Start(t)
	influxd.CreateDatabase(t, "plant")

	cfg := baseConfig(t, "solo", addrs, srv.HostPort)
	cfg.Temporal.ControlWorker = true
	cfg.Archive.Dir = t.TempDir()
	cfg.Influx.URL = influxd.URL
	cfg.Influx.Bucket = "plant/autogen"
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	w := startWorker(t, cfg, WithTemporalClient(srv.Client), WithSinks(rec.as("solo")), WithLogger(testLogger(t)), WithRegisterer(reg))
	defer w.stop(t)

	rs := makeReadings(12, 1, 60)
	produce(t, addrs, rs)
	want := reference(t, cfg.Graph, rs)
	require.Eventually(t, func() bool { return rec.has(want) }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, uint64(len(rs)), w.w.Source().Stats().Applied)
	rec.requireExact(t, want)

	ends := endOffsets(t, addrs, parts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for p := int32(0); p < parts; p++ {
		shard := streaming.KafkaShard(topic, int32(p))
		wantCursor := kafka.Partition{Topic: topic, Partition: p}.String()
		// The status query: a checkpoint at the partition's end.
		var st workflows.CheckpointState
		var qerr error
		require.Positive(t, ends[p], "partition %d got no readings; use more sensors", p)
		require.Eventually(t, func() bool {
			st, qerr = queryCheckpoint(ctx, srv.Client, cfg.Pipeline, shard)
			return qerr == nil && st.Completed > 0 && strings.HasSuffix(st.LastCursor, fmt.Sprintf("@%d", ends[p]))
		}, time.Minute, 100*time.Millisecond, "shard %s: no checkpoint at offset %d (last status %+v, query error %v)", shard, ends[p], st, qerr)
		require.NotNil(t, st.Owner)
		require.Equal(t, "solo", st.Owner.WorkerID)
		require.Equal(t, workflows.WorkerTaskQueue("solo"), st.Owner.TaskQueue)
		require.Equal(t, workflows.BreakerClosed, st.Breaker)
		require.Positive(t, st.LastBytes)
		require.Contains(t, st.LastCursor, wantCursor)

		// Visibility: the same checkpoint, found by its search attributes.
		query := fmt.Sprintf("TfloPipeline = %q AND TfloShard = %q", cfg.Pipeline, shard)
		var attrs map[string]string
		require.Eventually(t, func() bool {
			resp, err := srv.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			if err != nil || len(resp.Executions) != 1 {
				return false
			}
			attrs = map[string]string{}
			for name, p := range resp.Executions[0].GetSearchAttributes().GetIndexedFields() {
				var s any
				if converter.GetDefaultDataConverter().FromPayload(p, &s) == nil {
					attrs[name] = fmt.Sprint(s)
				}
			}
			return attrs["TfloLastCheckpoint"] != "" && resp.Executions[0].Execution.WorkflowId == workflows.CheckpointWorkflowID(cfg.Pipeline, shard)
		}, time.Minute, 200*time.Millisecond, "visibility: %s", query)
		require.Equal(t, cfg.Pipeline, attrs["TfloPipeline"])
		require.Equal(t, shard, attrs["TfloShard"])
		require.Equal(t, workflows.BreakerClosed, attrs["TfloBreakerState"])
		last, err := time.Parse(time.RFC3339Nano, attrs["TfloLastCheckpoint"])
		require.NoError(t, err, "TfloLastCheckpoint %q", attrs["TfloLastCheckpoint"])
		require.WithinDuration(t, time.Now(), last, 2*time.Minute)
	}

	// The metrics saw the records, their outputs and the checkpoints.
	require.Equal(t, float64(len(rs)), gather(t, reg, "tflo_central_records_in_total"))
	require.Equal(t, float64(len(want)), gather(t, reg, "tflo_central_records_out_total"))
	require.Equal(t, float64(parts), gather(t, reg, "tflo_central_owned_partitions"))
	require.Eventually(t, func() bool { return gather(t, reg, "tflo_central_checkpoints_total") >= parts }, 10*time.Second, 50*time.Millisecond)
	require.Positive(t, gather(t, reg, "tflo_central_checkpoint_duration_seconds"))
	require.Zero(t, gather(t, reg, "tflo_central_checkpoint_breaker_state"))

	// The handoff of each shard's first owner completed (no previous owner).
	for p := int32(0); p < parts; p++ {
		var hs workflows.HandoffState
		id := workflows.HandoffWorkflowID(cfg.Pipeline, streaming.KafkaShard(topic, int32(p)))
		hctx, hcancel := context.WithTimeout(ctx, 30*time.Second)
		err := srv.Client.GetWorkflow(hctx, id, "").Get(hctx, &hs)
		hcancel()
		if err != nil {
			v, qerr := srv.Client.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
			if qerr == nil {
				_ = v.Get(&hs)
			}
			desc, derr := srv.Client.DescribeWorkflow(ctx, id, "")
			t.Fatalf("handoff %s: %v; state %+v (query err %v); pending activities %v (%v)", id, err, hs, qerr, pendingActivities(desc), derr)
		}
		require.Equal(t, workflows.StepDone, hs.Step)
		require.Equal(t, "solo", hs.To.WorkerID)
	}

	// Graceful stop: final checkpoints, archive flushed, lease stopped.
	w.stop(t)
	var ls workflows.LeaseState
	require.NoError(t, srv.Client.GetWorkflow(ctx, workflows.LeaseWorkflowID("solo"), "").Get(ctx, &ls))
	require.Equal(t, workflows.LeaseStopped, ls.Status)

	// Influx holds one point per derived signal (the final checkpoints
	// flushed the sink before the stop returned).
	perSignal := map[string]int{}
	for k := range want {
		perSignal[k.signal]++
	}
	for _, sig := range graphOutputs {
		require.Equal(t, perSignal[sig], influxd.Count(t, "plant", sig), "influx points of %s", sig)
	}
	require.Positive(t, perSignal[SignalEpisode], "the readings opened no alarm episode")

	la, err := parquet.NewLocalArchive(cfg.Archive.Dir)
	require.NoError(t, err)
	archived := map[outKey]outVal{}
	for p := int32(0); p < parts; p++ {
		r, err := parquet.NewReader(la, parquet.ShardPrefix(cfg.Pipeline, p), parquet.WithExpectedFingerprint(parquet.SchemaFingerprint()))
		require.NoError(t, err)
		for e, err := range r.All(ctx, parquet.Position{}) {
			require.NoError(t, err)
			archived[outKey{e.Row.Sensor, e.Row.Signal, e.Row.TS}] = outVal{mode: streaming.Mode(e.Row.Mode), value: e.Row.Value}
		}
	}
	require.Equal(t, len(want), len(archived), "archived rows")
	for k, v := range want {
		require.Equal(t, v, archived[k], "archived %v", k)
	}
}

// TestStaleHandoffSuperseded: a handoff saga is stuck restoring the shard
// on an owner that died before it picked the step up (its steps on the
// owner's queue have no schedule-to-start deadline). When a worker gains
// the shard at a later epoch, its announcement terminates that saga and
// starts a new one that completes on it, naming the dead target as the
// previous owner.
func TestStaleHandoffSuperseded(t *testing.T) {
	srv := temporaltest.Start(t)
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cfg := baseConfig(t, "heir", addrs, srv.HostPort)
	cfg.Temporal.ControlWorker = true
	shard := streaming.KafkaShard(topic, 0)
	id := workflows.HandoffWorkflowID(cfg.Pipeline, shard)
	ghost := &workflows.Owner{WorkerID: "ghost", TaskQueue: workflows.WorkerTaskQueue("ghost"), Epoch: 1}
	stuck, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue},
		workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: cfg.Pipeline, Shard: shard, To: ghost})
	require.NoError(t, err)

	w := startWorker(t, cfg, WithTemporalClient(srv.Client), WithLogger(testLogger(t)))
	defer w.stop(t)

	// The stuck saga ends terminated...
	err = stuck.Get(ctx, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "terminated")
	// ...and the new one completes on the heir, from the ghost.
	var hs workflows.HandoffState
	waitHandoff(ctx, t, srv.Client, id, "heir", &hs)
	require.Equal(t, workflows.StepDone, hs.Step)
	require.NotNil(t, hs.From)
	require.Equal(t, "ghost", hs.From.WorkerID)
	require.Greater(t, hs.To.Epoch, ghost.Epoch)
}

// gather sums a metric family over its series (histograms: the sample
// count).
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

// TestRebalanceHandoffVerifiesFinalCheckpoint: a second worker joins; the
// group moves some partitions to it cooperatively, the first worker takes
// their final checkpoints in its revoke callback, and the handoff of each
// moved shard runs the old owner's FinalCheckpoint step (which returns
// that revoke checkpoint) and restores it on the new owner.
func TestRebalanceHandoffVerifiesFinalCheckpoint(t *testing.T) {
	srv := temporaltest.Start(t)
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	durable := memory.New()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	acfg := baseConfig(t, "first", addrs, srv.HostPort)
	acfg.Temporal.ControlWorker = true
	a := startWorker(t, acfg, WithTemporalClient(srv.Client), WithDurableStore(durable), WithLogger(testLogger(t).With("w", "first")))
	defer a.stop(t)
	require.Eventually(t, func() bool { return len(a.w.Host().HeldShards()) == parts }, 30*time.Second, 20*time.Millisecond)
	// The first owner has announced itself to every shard's checkpoint
	// workflow: that is where the next owner learns whom it replaces.
	for _, shard := range allShards(parts) {
		require.Eventually(t, func() bool {
			st, err := queryCheckpoint(ctx, srv.Client, acfg.Pipeline, shard)
			return err == nil && st.Owner != nil && st.Owner.WorkerID == "first"
		}, time.Minute, 50*time.Millisecond, "shard %s: first owner never announced", shard)
	}
	produce(t, addrs, makeReadings(16, 1, 20))
	require.Eventually(t, func() bool { return a.w.Source().Stats().Applied == 16*20 }, 30*time.Second, 20*time.Millisecond)

	b := startWorker(t, baseConfig(t, "second", addrs, srv.HostPort), WithTemporalClient(srv.Client), WithDurableStore(durable),
		WithLogger(testLogger(t).With("w", "second")))
	defer b.stop(t)
	require.Eventually(t, func() bool {
		na, nb := len(a.w.Host().HeldShards()), len(b.w.Host().HeldShards())
		return na > 0 && nb > 0 && na+nb == parts
	}, 30*time.Second, 20*time.Millisecond)

	for _, shard := range b.w.Host().HeldShards() {
		var hs workflows.HandoffState
		waitHandoff(ctx, t, srv.Client, workflows.HandoffWorkflowID(acfg.Pipeline, shard), "second", &hs)
		require.NotNil(t, hs.From, "handoff of %s does not name the first owner", shard)
		require.Equal(t, "first", hs.From.WorkerID)
		require.NotNil(t, hs.FinalCheckpoint, "handoff of %s: final checkpoint skipped: %s", shard, hs.FinalCheckpointSkipped)
		require.NotNil(t, hs.Restored)
		require.Equal(t, hs.FinalCheckpoint.CheckpointID, hs.Restored.CheckpointID,
			"the new owner restored another checkpoint than the old owner's final one")
		require.Equal(t, hs.FinalCheckpoint.Cursor, hs.Restored.Cursor)
		require.NotEmpty(t, hs.Restored.Cursor)
	}
}
