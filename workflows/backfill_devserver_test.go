package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestBackfillFiftyThousandFilesOnDevServer (issue 13, section 6): a
// backfill of an archive listing 50,000 files (1,000 partitions of 50)
// runs on a real dev server over stand-in activities, and every run of
// its continue-as-new chain stays far under Temporal's history limits
// (51,200 events, 50 MB) and every payload under the 2 MB blob limit.
// Before partition paging, the whole listing travelled in one activity
// result and about 8,500 files was the most a backfill could take.
func TestBackfillFiftyThousandFilesOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const parts, perPart = 1000, 50
	f := newFakeArchive(parts, perPart, 256)
	for _, p := range f.names {
		f.files[p] = perPart
	}
	startFakeArchiveWorkers(t, c, f, f.replay)

	in := workflows.BackfillInput{Name: "fifty-k", Location: "s3://archive/iot", Sink: "influx:replay/autogen", Window: 8, FilesPerActivity: 50}
	id, run, p := runOnDevServer(t, ctx, c, in)
	require.Equal(t, parts*perPart, p.FilesDone)
	require.Equal(t, parts, p.PartitionsDone)
	require.False(t, f.overlap)
	require.Greater(t, p.Runs, 1, "1,000 replay activities continue as new at least once")

	h := walkRuns(t, ctx, c, id, run.GetRunID())
	runs, maxEvents, maxPayload := h.runs, h.maxEvents, h.maxPayload
	require.Equal(t, p.Runs, runs)
	t.Logf("50,000 files, 1,000 partitions: %d runs, at most %d events per run, largest event %d bytes", runs, maxEvents, maxPayload)
	require.Less(t, maxEvents, 10_000, "a run's history stays under Temporal's 10,240-event warning")
	require.Less(t, maxPayload, 256<<10, "no event comes near the 2 MB payload limit")
}

// TestBackfillOfManySmallShardsOnDevServer: a backfill of 1,000 shards of
// one file each writes history events in proportion to its files over
// FilesPerActivity, not to its shards: the small partitions replay in
// batches. Before, every shard took at least one ReplayPartition
// activity (three events or more each), over 3,000 events in all.
func TestBackfillOfManySmallShardsOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const parts = 1000
	f := newFakeArchive(parts, 1, 256)
	for _, p := range f.names {
		f.files[p] = 1
	}
	startFakeArchiveWorkers(t, c, f, f.replay)

	in := workflows.BackfillInput{Name: "small-shards", Location: "s3://archive/iot", Sink: "influx:replay/autogen", Window: 8}
	id, run, p := runOnDevServer(t, ctx, c, in)
	require.Equal(t, parts, p.FilesDone)
	require.Equal(t, parts, p.PartitionsDone)
	require.False(t, f.overlap)
	for _, name := range f.names {
		require.Equal(t, 1, f.replayed[name], "partition %s replayed once", name)
	}
	events := walkRuns(t, ctx, c, id, run.GetRunID()).events
	t.Logf("1,000 shards of one file: %d replay activities, %d history events", f.replays, events)
	require.Less(t, f.replays, parts/10, "small shards replay in batches")
	require.Less(t, events, parts/2, "history grows with files per activity, not with shards")
}

// TestBackfillRequeueReplaysOnDevServer: the probe's backfill (see
// newProbeArchive), whose activities stop in big partitions and put the
// partitions after them back in the queue, continuing as new every 4
// activities, runs on a dev server, and every run's history replays (no
// recorded history has a lane stop short).
func TestBackfillRequeueReplaysOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, in := newProbeArchive()
	in.ActivitiesPerRun = 4
	var resumed atomic.Int32
	startFakeArchiveWorkers(t, c, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		if in.Start.Row > 0 {
			resumed.Add(1)
		}
		return f.replay(ctx, in)
	})
	id, run, p := runOnDevServer(t, ctx, c, in)
	requireEveryFileOnce(t, f, p)
	require.Positive(t, resumed.Load(), "activities stopped in big partitions")
	h := walkRuns(t, ctx, c, id, run.GetRunID())
	require.Greater(t, h.runs, 1)
	for _, rid := range h.runIDs {
		require.NoError(t, newReplayer().ReplayWorkflowHistory(nil, fetchHistory(t, c, c.GetWorkflow(ctx, id, rid))), "replay run %s", rid)
	}
}

// TestBackfillCancelCountsWhatTheReplaysFlushedOnDevServer: a backfill
// cancelled mid-batch carries, in its cancellation, the progress of what
// its replays had flushed (ReplayPartition answers a cancellation with
// its result as details), whole partitions of a batch included. Before, a
// cancelled replay's error carried nothing, and the progress counted none
// of it. (The test suite resolves a cancelled activity at once, without
// its answer: a dev server is needed.)
func TestBackfillCancelCountsWhatTheReplaysFlushedOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFakeArchive(40, 1, 40) // 1 to 3 files each: batched
	var started atomic.Int32
	var flushed atomic.Int64
	startFakeArchiveWorkers(t, c, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		// As ReplayPartition: the batch's first partition flushed whole
		// and one file of the second, then the cancellation.
		res := activities.ReplayPartitionResult{Partition: in.Partition, Finished: 1, Next: parquet.Position{File: "f1", Row: 1},
			Files: f.files[in.Partition] + 1, Bytes: 1000 * int64(f.files[in.Partition]+1), Rows: 100, Written: 100}
		flushed.Add(int64(res.Files))
		started.Add(1)
		for {
			activity.RecordHeartbeat(ctx, res)
			select {
			case <-ctx.Done():
				return res, temporal.NewCanceledError(res)
			case <-time.After(100 * time.Millisecond): // the heartbeat's pace
			}
		}
	})

	in := workflows.BackfillInput{Name: "cancel-mid-batch", Location: "s3://archive/iot", Sink: "influx:replay/autogen",
		Window: 2, FilesPerActivity: 16, HeartbeatTimeout: 2 * time.Second}
	id := workflows.BackfillWorkflowID(in.Name)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue}, workflows.BackfillWorkflow, in)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return started.Load() == 2 }, time.Minute, 10*time.Millisecond, "both lanes replay")
	require.NoError(t, c.CancelWorkflow(ctx, id, ""))
	err = run.Get(ctx, nil)
	var ce *temporal.CanceledError
	require.ErrorAs(t, err, &ce)
	var p workflows.BackfillProgress
	require.NoError(t, ce.Details(&p))
	require.Equal(t, 2, p.PartitionsDone, "the first partition of each lane's batch")
	require.Equal(t, int(flushed.Load()), p.FilesDone, "what the two replays flushed")
	require.Equal(t, int64(200), p.Written)
	require.Empty(t, p.Running)
}

// startFakeArchiveWorkers starts, on the dev server c, a control worker
// running the backfill workflow and a backfill worker whose activities
// stand in for f's archive, its replays done by replay.
func startFakeArchiveWorkers(t *testing.T, c client.Client, f *fakeArchive, replay func(context.Context, activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error)) {
	t.Helper()
	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	bw := worker.New(c, workflows.BackfillTaskQueue, worker.Options{})
	reg := func(fn any, name string) { bw.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(context.Context, activities.CountArchiveInput) (activities.ArchiveTotals, error) {
		return f.totals(), nil
	}, "CountArchive")
	reg(f.listPartitions, "ListPartitions")
	reg(replay, "ReplayPartition")
	require.NoError(t, bw.Start())
	t.Cleanup(bw.Stop)
}

// runOnDevServer runs the backfill in on c to its successful end and
// returns its workflow id, its last run and its progress.
func runOnDevServer(t *testing.T, ctx context.Context, c client.Client, in workflows.BackfillInput) (string, client.WorkflowRun, workflows.BackfillProgress) {
	t.Helper()
	id := workflows.BackfillWorkflowID(in.Name)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue}, workflows.BackfillWorkflow, in)
	require.NoError(t, err)
	var p workflows.BackfillProgress
	require.NoError(t, run.Get(ctx, &p))
	require.True(t, p.Done)
	return id, run, p
}

// runHistory sums the histories of a chain of runs (continue-as-new).
type runHistory struct {
	runs, events, maxEvents, maxPayload int
	runIDs                              []string // last first
}

// walkRuns walks workflow id's chain of runs back from runID: how many,
// their events in all and at most in one, and the largest event's size.
func walkRuns(t *testing.T, ctx context.Context, c client.Client, id, runID string) runHistory {
	t.Helper()
	var h runHistory
	for runID != "" {
		h.runs++
		h.runIDs = append(h.runIDs, runID)
		events, prev := 0, ""
		for _, ev := range temporaltest.History(t, ctx, c, id, runID) {
			events++
			h.maxPayload = max(h.maxPayload, proto.Size(ev))
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
				prev = a.GetContinuedExecutionRunId()
			}
		}
		h.events += events
		h.maxEvents = max(h.maxEvents, events)
		runID = prev
	}
	return h
}

// slowSink is a sink whose every Write takes delay (an InfluxDB under
// load), counting the rows written by key.
type slowSink struct {
	delay  time.Duration
	mu     sync.Mutex
	counts map[string]int
}

func (s *slowSink) Write(_ context.Context, outs []streaming.Output) error {
	time.Sleep(s.delay) // the sink's own pace, not a synchronisation
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range outs {
		r := parquet.RowOf(o)
		s.counts[fmt.Sprintf("%s/%d", r.Sensor, r.Offset)]++
	}
	return nil
}

func (s *slowSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	return nil
}
func (s *slowSink) Close(context.Context) error { return nil }

func (s *slowSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.counts)
}

// A replay into a sink slower than one heartbeat timeout per HeartbeatRows
// rows still ends: the activity heartbeats as it writes. Bug: it
// heartbeated only at its flushes (every 100,000 rows), so each attempt
// timed out before its first heartbeat and the retry started over from
// the same position: the backfill never ended.
func TestBackfillIntoASlowSinkKeepsHeartbeating(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const files, perFile = 12, 10_000
	dir, _ := writeCountingArchive(t, ctx, files, perFile)
	// 10 writes of 10,000 rows (ReplayPartition's batch) before the first
	// flush: 4s, twice the heartbeat timeout.
	sink := &slowSink{delay: 400 * time.Millisecond, counts: map[string]int{}}

	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	bw := worker.New(c, workflows.BackfillTaskQueue, worker.Options{})
	bw.RegisterActivity(&activities.Backfills{Sinks: func(string) (streaming.Sink, error) { return sink, nil }})
	require.NoError(t, bw.Start())
	t.Cleanup(bw.Stop)

	in := workflows.BackfillInput{Name: "slow-sink", Location: "file://" + dir, Sink: "mem", HeartbeatTimeout: 2 * time.Second}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID(in.Name), TaskQueue: workflows.ControlTaskQueue}, workflows.BackfillWorkflow, in)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
	defer wcancel()
	var p workflows.BackfillProgress
	require.NoError(t, run.Get(wctx, &p), "the backfill did not end (rows written so far: %d of %d)", sink.distinct(), files*perFile)
	require.True(t, p.Done)
	require.Equal(t, int64(files*perFile), p.RowsDone)
	require.Equal(t, files*perFile, sink.distinct())
}

// slowArchive is an archive whose every Open takes delay (an object
// store far away).
type slowArchive struct {
	parquet.Archive
	delay time.Duration
}

func (a slowArchive) Open(ctx context.Context, name string) (parquet.Object, error) {
	time.Sleep(a.delay) // the store's own pace, not a synchronisation
	return a.Archive.Open(ctx, name)
}

// A replay whose time range skips every row of many small files on a slow
// store writes nothing for a long while and still ends: the activity
// heartbeats at every file. Bug: it heartbeated only at its flushes
// (every 100,000 rows read), so each attempt timed out reading the files
// before the first flush and the retry started over: the backfill never
// ended.
func TestBackfillOfSkippedRowsOnASlowStoreKeepsHeartbeating(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const files, perFile = 120, 1000
	dir, arc := writeCountingArchive(t, ctx, files, perFile)
	// 100 files opened before the first flush: 4s, twice the heartbeat
	// timeout.
	slow := slowArchive{Archive: arc, delay: 40 * time.Millisecond}
	sink := &slowSink{counts: map[string]int{}}

	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	bw := worker.New(c, workflows.BackfillTaskQueue, worker.Options{})
	bw.RegisterActivity(&activities.Backfills{
		Sinks:    func(string) (streaming.Sink, error) { return sink, nil },
		Archives: func(string) (parquet.Archive, string, error) { return slow, "", nil },
	})
	require.NoError(t, bw.Start())
	t.Cleanup(bw.Stop)

	in := workflows.BackfillInput{Name: "skipped", Location: "file://" + dir, Sink: "mem", HeartbeatTimeout: 2 * time.Second,
		From: time.Unix(0, 1_700_000_000_000_000_000).Add(time.Hour)}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID(in.Name), TaskQueue: workflows.ControlTaskQueue}, workflows.BackfillWorkflow, in)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
	defer wcancel()
	var p workflows.BackfillProgress
	require.NoError(t, run.Get(wctx, &p), "the backfill did not end")
	require.True(t, p.Done)
	require.Equal(t, int64(files*perFile), p.Skipped)
	require.Equal(t, files, p.FilesDone)
	require.Zero(t, sink.distinct())
}

// writeCountingArchive writes files Parquet files of perFile rows each to
// partition 0 of pipeline "iot" in a new local archive, row n at offset n
// with value n, a millisecond apart, and returns the archive and its folder.
func writeCountingArchive(t *testing.T, ctx context.Context, files, perFile int) (string, parquet.Archive) {
	t.Helper()
	dir := t.TempDir()
	arc, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	w, err := parquet.NewWriter(arc, "iot", 0, 1)
	require.NoError(t, err)
	for f := range files {
		rows := make([]parquet.Row, perFile)
		for i := range rows {
			off := int64(f*perFile + i)
			rows[i] = parquet.Row{Sensor: "s", Signal: "mean", TS: 1_700_000_000_000_000_000 + off*int64(time.Millisecond), Value: float64(off), Offset: off}
		}
		_, err := w.WriteFile(ctx, rows)
		require.NoError(t, err)
	}
	return dir, arc
}
