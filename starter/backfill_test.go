package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// Regression (issue 15): --sink defaulted to "influx", which the workers
// refused only once the backfill ran. The sink and the archive location
// are checked before anything starts, and the default is valid.
func TestBackfillStartChecksSinkAndArchive(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--archive", "file:///a", "--sink", "influx"}, "influx:<db>/<rp>"},
		{[]string{"--archive", "file:///a", "--sink", "kafka:"}, "kafka:<topic>"},
		{[]string{"--archive", "file:///a", "--sink", "prometheus:x"}, "want influx"},
		{[]string{"--archive", "/var/tflo/archive"}, "no scheme"},
		{[]string{"--archive", "gs://b/p"}, `unsupported scheme "gs"`},
		{[]string{}, "--archive is required"},
		// Bug: 0 was accepted and the workflow ran its default instead.
		{[]string{"--archive", "file:///a", "--window", "0"}, "--window 0 must be at least 1"},
		{[]string{"--archive", "file:///a", "--files-per-activity", "0"}, "--files-per-activity 0 must be at least 1"},
		{[]string{"--archive", "file:///a", "--window", "-1"}, "--window -1 must be at least 1"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, append([]string{"backfill", "start", "--name", "x", "--address", "127.0.0.1:1"}, tc.args...)...)
			assert.Equal(t, exitUsage, r.code, "stderr: %s", r.err)
			assert.Contains(t, r.err, tc.want)
		})
	}
	cmd := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{})
	start, _, err := cmd.Find([]string{"backfill", "start"})
	require.NoError(t, err)
	def := start.Flags().Lookup("sink").DefValue
	assert.Equal(t, "influx:iot_portal_replay/autogen", def)
	for _, ex := range strings.Split(start.Example, "\n") {
		if i := strings.Index(ex, "--sink "); i >= 0 {
			sink := strings.Fields(ex[i+len("--sink "):])[0]
			r := run(t, "backfill", "start", "--name", "x", "--address", "127.0.0.1:1", "--archive", "file:///a", "--sink", sink)
			assert.NotEqual(t, exitUsage, r.code, "the example sink %s is refused: %s", sink, r.err)
		}
	}
}

// TestFilesPerActivityFlagSaysHowShardsAreBatched: the workflow batches
// shards by the archive's average files per shard (files-per-activity
// over the average, workflows.BackfillWorkflow), not by each shard's
// size. Bug: the flag said "shards smaller than that go several to an
// activity", and in an archive averaging 200 files a shard of 10 went
// alone with files-per-activity 256.
func TestFilesPerActivityFlagSaysHowShardsAreBatched(t *testing.T) {
	cmd := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{})
	start, _, err := cmd.Find([]string{"backfill", "start"})
	require.NoError(t, err)
	usage := start.Flags().Lookup("files-per-activity").Usage
	assert.NotContains(t, usage, "shards smaller than that")
	assert.Contains(t, usage, "shards average at most half of it")
}

func TestProgressLineBytes(t *testing.T) {
	line := progressLine(workflows.BackfillProgress{FilesDone: 10, FilesTotal: 40, RowsDone: 5000, BytesDone: 1 << 20, BytesTotal: 4 << 20, RowsPerSecond: 1200, ETA: 3 * time.Second})
	assert.Equal(t, "[#######-----------------------]  25%  files 10/40  rows 5000  1.0 MiB/4.0 MiB  1200 rows/s  ETA 3s", line)
}

// Cancelling a backfill that ended already says so (exit 3) and names how
// it ended. Bug: the server accepts the request for a closed workflow, and
// the command printed "backfill x cancelled" and exited 0 for a backfill
// that had completed, failed or been terminated. A running one's cancel
// printed "cancelled" as the server took the request, before anything
// stopped (and again at a second cancel): it says the cancellation is
// requested.
func TestBackfillCancelOfAnEndedBackfill(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	// No worker serves the control task queue: the backfills stay running
	// until terminated.
	for _, name := range []string{"ended", "running"} {
		r := run(t, "backfill", "start", addr, "--name", name, "--archive", "file:///archive")
		require.Equal(t, exitOK, r.code, r.err)
	}
	require.NoError(t, srv.Client.TerminateWorkflow(context.Background(), workflows.BackfillWorkflowID("ended"), "", "test"))

	// Its status is how it ended, with no progress: no control worker
	// polls to answer the query (and none ever ran it).
	r := run(t, "backfill", "status", addr, "--name", "ended")
	assert.Equal(t, exitFailure, r.code, "%s %s", r.out, r.err)
	assert.Contains(t, r.out, "terminated")
	assert.Contains(t, r.out, "no progress to show")
	assert.Contains(t, r.err, `backfill "ended" terminated`)
	r = run(t, "backfill", "status", addr, "--name", "ended", "-o", "json")
	assert.Equal(t, exitFailure, r.code, "%s %s", r.out, r.err)
	assert.Contains(t, r.out, `"status": "terminated"`)

	r = run(t, "backfill", "cancel", addr, "--name", "ended")
	assert.Equal(t, exitNotFound, r.code, "%s %s", r.out, r.err)
	assert.Equal(t, "Error: backfill \"ended\" is not running (it is terminated): nothing to cancel\n", r.err)
	assert.NotContains(t, r.out, "cancelled")

	r = run(t, "backfill", "cancel", addr, "--name", "running")
	require.Equal(t, exitOK, r.code, r.err)
	// Requested, not done: no control worker runs the workflow, which
	// stays running; the command says no more than that.
	assert.Equal(t, "backfill running: cancellation requested; replays in flight stop at their next heartbeat (starter backfill status --name running --wait shows the end)\n", r.out)
	r = run(t, "backfill", "cancel", addr, "--name", "running", "-o", "json")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, `"cancel_requested": "`+workflows.BackfillWorkflowID("running")+`"`)
	r = run(t, "backfill", "cancel", addr, "--name", "missing")
	assert.Equal(t, exitNotFound, r.code, r.err)
	assert.Equal(t, "Error: no backfill named \"missing\"\n", r.err)
}

// TestBackfillStatusWithoutAControlWorker: with no control worker polling
// tflo-control, backfill status waited ~10s for its status query; then a
// running backfill failed with the server's timeout, and one that had
// completed printed "completed (no worker ran it: no progress was
// recorded)", though a worker had run it. It says at once that no control
// worker polls, and shows how an ended backfill stands.
func TestBackfillStatusWithoutAControlWorker(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	ctx := context.Background()

	// A backfill that ran to its end on a worker gone since (a queue of
	// its own: nothing polls tflo-control).
	completeBackfill(t, srv, "gone", "done")
	// One that runs, started by type name: no worker runs it.
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID("running"), TaskQueue: workflows.ControlTaskQueue},
		"BackfillWorkflow", workflows.BackfillInput{Name: "running"})
	require.NoError(t, err)

	for _, args := range [][]string{{"--name", "running"}, {"--name", "running", "--wait"}} {
		start := time.Now()
		r := run(t, append([]string{"backfill", "status", addr}, args...)...)
		assert.Equal(t, exitFailure, r.code, "%v: %s", args, r.err)
		assert.Equal(t, `Error: backfill "running" (workflow `+workflows.BackfillWorkflowID("running")+`) runs, but no worker answers its status query: `+
			"no control worker polls task queue tflo-control, so nothing runs tflo's workflows: start a worker with control_worker: true (TFLO_CONTROL_WORKER=true), or starter demo\n", r.err, args)
		assert.Empty(t, r.out, args)
		assert.Less(t, time.Since(start), 5*time.Second, "%v: it does not wait for the query to time out", args)
	}

	start := time.Now()
	r := run(t, "backfill", "status", addr, "--name", "done")
	assert.Equal(t, exitOK, r.code, r.err)
	assert.Equal(t, "completed (no control worker polls task queue tflo-control to answer its status query: no progress to show)\n", r.out)
	assert.Less(t, time.Since(start), 5*time.Second, "it does not wait for the query to time out")
	r = run(t, "backfill", "status", addr, "--name", "done", "--json")
	assert.Equal(t, exitOK, r.code, r.err)
	assert.JSONEq(t, `{"name": "done", "status": "completed", "progress": null}`, r.out)

	r = run(t, "backfill", "status", addr, "--name", "missing")
	assert.Equal(t, exitNotFound, r.code, r.err)
	assert.Equal(t, "Error: no backfill named \"missing\"\n", r.err)
}

// completeBackfill runs backfill name to its end on a worker of queue,
// gone once it returns: a stand-in for BackfillWorkflow that completes at
// once and answers its status query with 3 files done.
func completeBackfill(t *testing.T, srv *temporaltest.Server, queue, name string) {
	t.Helper()
	ctx := context.Background()
	w := worker.New(srv.Client, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ workflows.BackfillInput) error {
		p := workflows.BackfillProgress{Name: name, FilesTotal: 3, FilesDone: 3, Done: true}
		return workflow.SetQueryHandler(ctx, workflows.QueryStatus, func() (workflows.BackfillProgress, error) { return p, nil })
	}, workflow.RegisterOptions{Name: "BackfillWorkflow"})
	require.NoError(t, w.Start())
	defer w.Stop()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID(name), TaskQueue: queue},
		"BackfillWorkflow", workflows.BackfillInput{Name: name})
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, nil))
}

// TestBackfillStatusOfAnUnansweredQuery: a control worker polls
// tflo-control but does not answer the status query of a backfill that
// completed (stuck, or gone a moment ago): the status says the query was
// not answered, on which task queue, within how long (and, when the
// check of the queue's pollers failed, that whether one polls is not
// known, with the check's error). Before, it said
// "completed (no worker ran it: no progress was recorded)", though a
// worker had run it to its end.
func TestBackfillStatusOfAnUnansweredQuery(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	completeBackfill(t, srv, workflows.ControlTaskQueue, "done")

	silentControlPoller(t, srv)
	ctx := context.Background()
	addr := "--address=" + srv.HostPort
	r := run(t, "backfill", "status", addr, "--name", "done")
	assert.Equal(t, exitOK, r.code, r.err)
	assert.NotContains(t, r.out, "no worker ran it")
	assert.Regexp(t, `^completed \(its status query, on task queue tflo-control, was not answered within \d+s: no progress to show\)\n$`, r.out)
	// Bug: when the check of tflo-control's pollers failed, the status
	// said no more than that; it says the check failed, and how.
	r = runWith(t, pollersUnknown{srv.Client}, "backfill", "status", addr, "--name", "done")
	assert.Equal(t, exitOK, r.code, r.err)
	assert.Regexp(t, `^completed \(its status query, on task queue tflo-control, was not answered within \d+s: no progress to show; `+
		`whether a worker polls task queue tflo-control is not known: describe task queue tflo-control: describe refused\)\n$`, r.out)

	// One that ended before a worker completed a step of it (the silent
	// poller took its first task) was run by none: that is still said.
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID("never"), TaskQueue: workflows.ControlTaskQueue},
		"BackfillWorkflow", workflows.BackfillInput{Name: "never"})
	require.NoError(t, err)
	require.NoError(t, srv.Client.TerminateWorkflow(ctx, workflows.BackfillWorkflowID("never"), "", "test"))
	r = run(t, "backfill", "status", addr, "--name", "never")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Equal(t, "terminated (no worker ran it: no progress was recorded)\n", r.out)
}

// pollersUnknown is a client whose DescribeTaskQueue is refused (as a
// server refuses a caller without the permission), so whether a worker
// polls tflo-control is not known; its other calls go to Client, which
// its Close leaves open.
type pollersUnknown struct{ client.Client }

func (pollersUnknown) DescribeTaskQueue(context.Context, string, enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	return nil, serviceerror.NewPermissionDenied("describe refused", "")
}

func (pollersUnknown) Close() {}

// silentControlPoller polls tflo-control for workflow tasks (the queries'
// too) as a worker would, identity "silent", and answers none, until the
// test ends. It returns once the server lists it as a poller.
func silentControlPoller(t *testing.T, srv *temporaltest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	polling := make(chan struct{})
	t.Cleanup(func() { cancel(); <-polling })
	go func() {
		defer close(polling)
		for ctx.Err() == nil {
			// A long poll, as a worker's (the server wants a deadline).
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, _ = srv.Client.WorkflowService().PollWorkflowTaskQueue(pctx, &workflowservice.PollWorkflowTaskQueueRequest{
				Namespace: "default", Identity: "silent",
				TaskQueue: &taskqueuepb.TaskQueue{Name: workflows.ControlTaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			})
			cancel()
		}
	}()
	require.Eventually(t, func() bool {
		resp, err := srv.Client.DescribeTaskQueue(ctx, workflows.ControlTaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			return false
		}
		for _, p := range resp.GetPollers() {
			if p.GetIdentity() == "silent" {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the silent poller polls")
}

// TestStatusQueryOfABusyControlWorker: a control worker polls tflo-control
// but does not answer the status query of a running backfill or lease, or
// the shards query of a running coordinator (busy, or stuck). Bug: the error
// asked whether a control worker runs on tflo-control, which one does.
// It says that one polls (which) and did not answer within how long, and
// to see its logs.
func TestStatusQueryOfABusyControlWorker(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	ctx := context.Background()
	// Started by type name: only the silent poller takes their tasks.
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID("running"), TaskQueue: workflows.ControlTaskQueue},
		"BackfillWorkflow", workflows.BackfillInput{Name: "running"})
	require.NoError(t, err)
	_, err = srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.CoordinatorWorkflowID("cli"), TaskQueue: workflows.ControlTaskQueue},
		"CoordinatorWorkflow", workflows.CoordinatorInput{Pipeline: "cli", Manual: true})
	require.NoError(t, err)
	startUnservedLease(t, srv, "w1")
	silentControlPoller(t, srv)

	const busy = `a worker polls task queue tflo-control \(silent\) but did not answer within \d+s: it may be busy or stuck; see that worker's logs\)\n$`
	r := run(t, "backfill", "status", addr, "--name", "running")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Regexp(t, `^Error: query backfill "running" \(workflow `+workflows.BackfillWorkflowID("running")+`\): .* \(`+busy, r.err)
	assert.NotContains(t, r.err, "control_worker: true")
	assert.Empty(t, r.out)

	r = run(t, "pipeline", "status", addr, "--pipeline", "cli")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Regexp(t, `^Error: query `+workflows.CoordinatorWorkflowID("cli")+`: .* \(`+busy, r.err)
	assert.NotContains(t, r.err, "control_worker: true")
	assert.Empty(t, r.out)

	// Bug: starter workers gave the server's bare deadline error.
	r = run(t, "workers", addr)
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Regexp(t, `^Error: query `+workflows.LeaseWorkflowIDPrefix+`w1: .* \(`+busy, r.err)
	assert.NotContains(t, r.err, "control_worker: true")
	assert.Empty(t, r.out)

	// Whether one polls is not known when the check fails (here: a
	// namespace the server does not have): the hint says so.
	other, err := client.Dial(client.Options{HostPort: srv.HostPort, Namespace: "nosuch"})
	require.NoError(t, err)
	defer other.Close()
	hint := noWorkerHint(ctx, other, serviceerror.NewDeadlineExceeded("query timed out"), 10*time.Second)
	assert.Regexp(t, `^ \(no worker answered within 10s, and whether one polls task queue tflo-control is not known: describe task queue tflo-control: .*nosuch.*\)$`, hint)
}

// TestBackfillStatusShowsWhereEachReplayIs: the status of a running
// backfill shows, for each replay activity in flight, the partition it is
// in, where, and what it flushed, from its last heartbeat; before a
// replay heartbeated, the partitions in flight as the status query has
// them. Bug: the text showed neither, and -o json only the status query's
// Running, which names every partition of a batch, not the one its
// activity is in (the workflow sees no heartbeat).
func TestBackfillStatusShowsWhereEachReplayIs(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	ctx := context.Background()
	const first = "a/shard-000000/" // fakeactivities.Stages' first partition
	file := first + "f-000001.parquet"
	beat, release := make(chan struct{}), make(chan struct{})
	stages := &fakeactivities.Stages{ReplayPartition: func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		done := activities.ReplayPartitionResult{Partition: in.Partition, Finished: 1 + len(in.Then), Done: true}
		if in.Partition != first {
			return done, nil
		}
		for _, ch := range []chan struct{}{beat, release} {
			select {
			case <-ch:
			case <-ctx.Done():
				return activities.ReplayPartitionResult{}, ctx.Err()
			}
			if ch == beat {
				activity.RecordHeartbeat(ctx, activities.ReplayPartitionResult{Partition: first, Next: parquet.Position{File: file, Row: 1200}, Files: 1, Rows: 1200, Written: 1200})
			}
		}
		return done, nil
	}}
	startStageWorkers(t, srv, stages, workflows.BackfillTaskQueue)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	r := run(t, "backfill", "start", addr, "--name", "where", "--archive", "file:///archive", "--window", "1")
	require.Equal(t, exitOK, r.code, r.err)
	id := workflows.BackfillWorkflowID("where")
	replayPending := func(heartbeated bool) func() bool {
		return replayPendingWhere(srv, id, func(pa *workflowpb.PendingActivityInfo) bool {
			return pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED && (pa.GetHeartbeatDetails() != nil) == heartbeated
		})
	}
	require.Eventually(t, replayPending(false), 30*time.Second, 50*time.Millisecond, "the replay of %s runs", first)

	r = run(t, "backfill", "status", addr, "--name", "where")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Regexp(t, `^\[-+\] +0%  files 0/3 .*  running\n  in flight \(no replay has heartbeated yet\): a/shard-000000/\n$`, r.out)

	close(beat)
	require.Eventually(t, replayPending(true), 30*time.Second, 50*time.Millisecond, "the replay's heartbeat reaches the server")
	r = run(t, "backfill", "status", addr, "--name", "where")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Regexp(t, `\n  replaying a/shard-000000/ at file a/shard-000000/f-000001\.parquet row 1200 \(this activity flushed 1 files, 1200 rows; attempt 1, last heartbeat [0-9.]+m?s ago\)\n$`, r.out)
	r = run(t, "backfill", "status", addr, "--name", "where", "-o", "json")
	require.Equal(t, exitOK, r.code, r.err)
	var st struct {
		Progress struct {
			Running []string `json:"running"`
		} `json:"progress"`
		Replaying []replay `json:"replaying"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &st), r.out)
	assert.Equal(t, []string{first}, st.Progress.Running)
	require.Len(t, st.Replaying, 1, r.out)
	rep := st.Replaying[0]
	assert.NotEmpty(t, rep.ActivityID)
	assert.Equal(t, replay{ActivityID: rep.ActivityID, Partition: first, Batch: first, File: file, Row: 1200, Files: 1, Rows: 1200, Written: 1200, Attempt: 1, LastHeartbeat: rep.LastHeartbeat}, rep)
	assert.WithinDuration(t, time.Now(), rep.LastHeartbeat, time.Minute)

	close(release)
	require.NoError(t, srv.Client.GetWorkflow(ctx, id, "").Get(ctx, nil))
}

// replayPendingWhere tells, for require.Eventually, whether backfill
// workflow id has a ReplayPartition activity pending that cond holds of.
func replayPendingWhere(srv *temporaltest.Server, id string, cond func(*workflowpb.PendingActivityInfo) bool) func() bool {
	return func() bool {
		d, err := srv.Client.DescribeWorkflow(context.Background(), id, "")
		if err != nil {
			return false
		}
		for _, pa := range d.RawResponse.GetPendingActivities() {
			if pa.GetActivityType().GetName() == "ReplayPartition" && cond(pa) {
				return true
			}
		}
		return false
	}
}

// TestBackfillStatusShowsAReplayWaitingToRetry: a replay whose attempt
// failed, its retry waiting (here for a worker: its worker stopped), is
// shown waiting to retry, with the failure, shortened to a line, and
// when the next attempt is due: where it stands when it heartbeated,
// else where its input starts it. Bugs: it read "replaying", with its
// attempt and heartbeat age only; with no heartbeat, it was hidden behind
// "in flight (no replay has heartbeated yet)".
func TestBackfillStatusShowsAReplayWaitingToRetry(t *testing.T) {
	const first = "a/shard-000000/" // fakeactivities.Stages' first partition
	file := first + "f-000001.parquet"
	for _, tc := range []struct {
		name      string
		heartbeat bool
		want      string
	}{
		{"heartbeated", true, `\n  waiting to retry a/shard-000000/ at file a/shard-000000/f-000001\.parquet row 1200 \(this activity flushed 1 files, 1200 rows; attempt 2 (in|due since) [0-9.]+m?s, last heartbeat [0-9.]+m?s ago; last failure: sink influx: 503 service unavailable, retry later\)\n$`},
		{"before a heartbeat", false, `\n  waiting to retry a/shard-000000/, at its start \(this activity flushed 0 files, 0 rows; attempt 2 (in|due since) [0-9.]+m?s, last heartbeat -; last failure: sink influx: 503 service unavailable, retry later\)\n$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolateTemporalConfig(t)
			srv := temporaltest.Start(t)
			addr := "--address=" + srv.HostPort
			stages := &fakeactivities.Stages{ReplayPartition: func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
				if in.Partition == first && activity.GetInfo(ctx).Attempt == 1 {
					if tc.heartbeat {
						activity.RecordHeartbeat(ctx, activities.ReplayPartitionResult{Partition: first, BatchSize: 1, Next: parquet.Position{File: file, Row: 1200}, Files: 1, Rows: 1200, Written: 1200})
					}
					<-activity.GetWorkerStopChannel(ctx)
				}
				return activities.ReplayPartitionResult{}, errors.New("sink influx: 503 service unavailable,\n  retry later")
			}}
			replayWorker := startStageWorkers(t, srv, stages, workflows.BackfillTaskQueue)[0]

			r := run(t, "backfill", "start", addr, "--name", "retry", "--archive", "file:///archive", "--window", "1")
			require.Equal(t, exitOK, r.code, r.err)
			id := workflows.BackfillWorkflowID("retry")
			require.Eventually(t, replayPendingWhere(srv, id, func(pa *workflowpb.PendingActivityInfo) bool {
				return pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED && (pa.GetHeartbeatDetails() != nil) == tc.heartbeat
			}), 30*time.Second, 50*time.Millisecond, "the replay runs (its heartbeat reaching the server: %v)", tc.heartbeat)
			replayWorker.Stop() // the attempt fails; no worker takes the retry
			require.Eventually(t, replayPendingWhere(srv, id, func(pa *workflowpb.PendingActivityInfo) bool {
				return pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED && pa.GetAttempt() == 2 && pa.GetLastFailure() != nil
			}), 30*time.Second, 50*time.Millisecond, "the retry waits")

			r = run(t, "backfill", "status", addr, "--name", "retry")
			require.Equal(t, exitOK, r.code, r.err)
			assert.Regexp(t, tc.want, r.out)
			r = run(t, "backfill", "status", addr, "--name", "retry", "-o", "json")
			require.Equal(t, exitOK, r.code, r.err)
			var st struct {
				Replaying []replay `json:"replaying"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.out), &st), r.out)
			require.Len(t, st.Replaying, 1, r.out)
			rep := st.Replaying[0]
			assert.NotEmpty(t, rep.ActivityID)
			assert.Equal(t, first, rep.Partition)
			assert.Equal(t, first, rep.Batch)
			assert.True(t, rep.Retrying)
			assert.Equal(t, "sink influx: 503 service unavailable,\n  retry later", rep.LastFailure, "whole, under -o json")
			assert.WithinDuration(t, time.Now(), rep.NextAttempt, time.Minute)
		})
	}
}

// TestReplaysInFlightNamesThePartitionNotTheBatch: a ReplayPartition
// heartbeat names its batch's first partition and how many of the batch
// it finished; the status query's Running (each batch's partitions in
// order) names the one it is in. A ReplayFile heartbeat names its file.
func TestReplaysInFlightNamesThePartitionNotTheBatch(t *testing.T) {
	pending := func(typ string, hb any) *workflowpb.PendingActivityInfo { return pendingActivity(t, typ, hb) }
	running := []string{"p0", "p1", "p2", "p3", "p4"}
	reps, waiting := replaysInFlight([]*workflowpb.PendingActivityInfo{
		pending("ReplayPartition", activities.ReplayPartitionResult{Partition: "p1", Finished: 2, Next: parquet.Position{File: "p3/f2", Row: 5}, Files: 4, Rows: 40}),
		pending("ReplayPartition", activities.ReplayPartitionResult{Partition: "p0"}),
		pending("ReplayPartition", activities.ReplayPartitionResult{Partition: "gone", Finished: 1}),
		pending("ReplayFile", activities.ReplayFileProgress{Position: parquet.Position{File: "x.parquet", Row: 7}, Rows: 7}),
		pending("ReplayPartition", nil),
		pending("CountArchive", 3),
	}, running)
	assert.Equal(t, []replay{
		{Partition: "p3", Batch: "p1", Finished: 2, File: "p3/f2", Row: 5, Files: 4, Rows: 40, Attempt: 2},
		{Partition: "p0", Batch: "p0", Attempt: 2},
		{Batch: "gone", Finished: 1, Attempt: 2},
		{Partition: "x.parquet", Row: 7, Rows: 7, Attempt: 2},
	}, reps)
	assert.Equal(t, 1, waiting, "the replay with no heartbeat")

	var out bytes.Buffer
	printReplays(&out, reps, waiting, running)
	assert.Equal(t, `  replaying p3 at file p3/f2 row 5 (this activity flushed 4 files, 40 rows; attempt 2, last heartbeat -)
  replaying p0, at its start (this activity flushed 0 files, 0 rows; attempt 2, last heartbeat -)
  replaying partition 2 of the batch beginning with gone, at its start (this activity flushed 0 files, 0 rows; attempt 2, last heartbeat -)
  replaying x.parquet at row 7 (this activity flushed 7 rows; attempt 2, last heartbeat -)
  and 1 replay with no heartbeat yet
`, out.String())
	out.Reset()
	printReplays(&out, nil, 2, running)
	assert.Equal(t, "  in flight (no replay has heartbeated yet): p0, p1, p2, p3, p4\n", out.String())
}

// pendingActivity is a started activity of type typ, in its second
// attempt, as DescribeWorkflow lists it, with heartbeat details hb (nil:
// none).
func pendingActivity(t *testing.T, typ string, hb any) *workflowpb.PendingActivityInfo {
	t.Helper()
	pa := &workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: typ}, Attempt: 2,
		State: enumspb.PENDING_ACTIVITY_STATE_STARTED}
	if hb != nil {
		p, err := converter.GetDefaultDataConverter().ToPayloads(hb)
		require.NoError(t, err)
		pa.HeartbeatDetails = p
	}
	return pa
}

// TestReplaysInFlightOfABatchReplayedToItsEnd: a replay activity that
// replayed every partition of its batch but has not completed (or whose
// worker died then) is shown finishing its batch. Bug: its heartbeat
// did not give the batch's size, and the line named the partition after
// the batch's last in the status query's Running, the next batch's first.
// A heartbeat of a build before the size still reads as it did.
func TestReplaysInFlightOfABatchReplayedToItsEnd(t *testing.T) {
	running := []string{"p0", "p1", "p2", "p3", "p4"}
	reps, waiting := replaysInFlight([]*workflowpb.PendingActivityInfo{
		pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p1", BatchSize: 2, Finished: 2, Files: 3, Rows: 30}),
		pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p3", BatchSize: 1, Finished: 1, Files: 1, Rows: 10}),
		pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p0", BatchSize: 1, Next: parquet.Position{File: "p0/f1", Row: 9}, Files: 1, Rows: 9}),
		pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p1", Finished: 1}), // a build before BatchSize
	}, running)
	assert.Zero(t, waiting)
	var out bytes.Buffer
	printReplays(&out, reps, waiting, running)
	assert.Equal(t, `  finishing the batch of 2 partitions beginning with p1, all replayed (this activity flushed 3 files, 30 rows; attempt 2, last heartbeat -)
  finishing p3, replayed to its end (this activity flushed 1 files, 10 rows; attempt 2, last heartbeat -)
  replaying p0 at file p0/f1 row 9 (this activity flushed 1 files, 9 rows; attempt 2, last heartbeat -)
  replaying p2, at its start (this activity flushed 0 files, 0 rows; attempt 2, last heartbeat -)
`, out.String())
}

// TestReplaysInFlightStoppingAtTheFileLimit: a replay activity whose
// last heartbeat says it stops at its files-per-activity limit (between
// partitions of its batch, or inside one) is shown stopping, with where
// the next activity goes on, also while its retry waits (-o json:
// "stopping"). Before, one that stopped between partitions read
// "replaying P, at its start" of the next partition P, which no activity
// replayed until the next was started.
func TestReplaysInFlightStoppingAtTheFileLimit(t *testing.T) {
	running := []string{"p0", "p1", "p2", "p3"}
	reps, waiting := replaysInFlight([]*workflowpb.PendingActivityInfo{
		pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p0", BatchSize: 2, Finished: 1, Stopping: true, Files: 4, Rows: 40}),
		retryingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p2", BatchSize: 2, Next: parquet.Position{File: "p2/f3", Row: 10}, Stopping: true, Files: 4, Rows: 40}, time.Time{}, "worker gone"),
	}, running)
	assert.Zero(t, waiting)
	require.Len(t, reps, 2)
	assert.True(t, reps[0].Stopping)
	assert.Equal(t, "p1", reps[0].Partition, "where the next activity goes on")
	var out bytes.Buffer
	printReplays(&out, reps, waiting, running)
	assert.Equal(t, `  stopping at its files-per-activity limit; the next activity goes on in p1, at its start (this activity flushed 4 files, 40 rows; attempt 2, last heartbeat -)
  waiting to retry, stopping at its files-per-activity limit; the next activity goes on in p2 at file p2/f3 row 10 (this activity flushed 4 files, 40 rows; attempt 3, last heartbeat -; last failure: worker gone)
`, out.String())
}

// TestReplaysInFlightWaitingToRetry: a replay whose retry waits reads
// "waiting to retry", with when its attempt is due (if the server says)
// and its last failure on one line; one whose retry started reads
// "replaying". Bug: all read "replaying", with no failure.
func TestReplaysInFlightWaitingToRetry(t *testing.T) {
	retrying := func(hb any, next time.Time, failure string) *workflowpb.PendingActivityInfo {
		return retryingActivity(t, "ReplayPartition", hb, next, failure)
	}
	running := []string{"p0", "p1", "p2"}
	reps, waiting := replaysInFlight([]*workflowpb.PendingActivityInfo{
		retrying(activities.ReplayPartitionResult{Partition: "p0", BatchSize: 1, Next: parquet.Position{File: "p0/f1", Row: 9}, Files: 1, Rows: 9}, time.Time{}, "sink down"),
		retrying(activities.ReplayPartitionResult{Partition: "p1", BatchSize: 2, Finished: 2, Files: 2, Rows: 20}, time.Now().Add(-time.Hour), strings.Repeat("x", 200)),
		pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p2", BatchSize: 1}), // attempt 2 started
	}, running)
	assert.Zero(t, waiting)
	var out bytes.Buffer
	printReplays(&out, reps, waiting, running)
	assert.Regexp(t, `^  waiting to retry p0 at file p0/f1 row 9 \(this activity flushed 1 files, 9 rows; attempt 3, last heartbeat -; last failure: sink down\)
  waiting to retry the batch of 2 partitions beginning with p1, all replayed \(this activity flushed 2 files, 20 rows; attempt 3 due since 1h0m[01]s, last heartbeat -; last failure: x{99}…\)
  replaying p2, at its start \(this activity flushed 0 files, 0 rows; attempt 2, last heartbeat -\)
$`, out.String())
}

// retryingActivity is a pending activity of type typ, with heartbeat
// details hb (nil: none), whose third attempt waits, due at next (zero:
// the server does not say), its last attempt failed with failure.
func retryingActivity(t *testing.T, typ string, hb any, next time.Time, failure string) *workflowpb.PendingActivityInfo {
	t.Helper()
	pa := pendingActivity(t, typ, hb)
	pa.State, pa.Attempt, pa.LastFailure = enumspb.PENDING_ACTIVITY_STATE_SCHEDULED, 3, &failurepb.Failure{Message: failure}
	if !next.IsZero() {
		pa.NextAttemptScheduleTime = timestamppb.New(next)
	}
	return pa
}

// TestReplaysInFlightWaitingToRetryBeforeAHeartbeat: a replay whose
// attempt failed before its first heartbeat (as each does while the sink
// is down) and whose retry waits is shown, by its activity id, with when
// the attempt is due and its last failure, also when no replay
// heartbeated (under the partitions in flight); -o json has it with
// retrying, next_attempt and last_failure. Bug: it was only counted in
// "N replays with no heartbeat yet", or hidden behind "in flight (no
// replay has heartbeated yet)": its failure was never shown.
func TestReplaysInFlightWaitingToRetryBeforeAHeartbeat(t *testing.T) {
	withID := func(id string, pa *workflowpb.PendingActivityInfo) *workflowpb.PendingActivityInfo {
		pa.ActivityId = id
		return pa
	}
	running := []string{"p0", "p1", "p2"}
	next := time.Now().Add(time.Hour)
	reps, waiting := replaysInFlight([]*workflowpb.PendingActivityInfo{
		withID("5", pendingActivity(t, "ReplayPartition", activities.ReplayPartitionResult{Partition: "p0", BatchSize: 1, Next: parquet.Position{File: "p0/f1", Row: 9}, Files: 1, Rows: 9})),
		withID("6", retryingActivity(t, "ReplayPartition", nil, next, "sink influx: 503 service unavailable,\n  retry later")),
		withID("7", pendingActivity(t, "ReplayPartition", nil)), // attempt 2 started, no heartbeat yet
	}, running)
	assert.Equal(t, 1, waiting, "the started replay with no heartbeat")
	var out bytes.Buffer
	printReplays(&out, reps, waiting, running)
	assert.Regexp(t, `^  replaying p0 at file p0/f1 row 9 \(this activity flushed 1 files, 9 rows; attempt 2, last heartbeat -\)
  waiting to retry replay activity 6 \(attempt 3 in (59m5[0-9]s|1h0m0s), no heartbeat yet; last failure: sink influx: 503 service unavailable, retry later\)
  and 1 replay with no heartbeat yet
$`, out.String())

	// No replay heartbeated: each waits to retry, the sink down.
	reps, waiting = replaysInFlight([]*workflowpb.PendingActivityInfo{
		withID("8", retryingActivity(t, "ReplayPartition", nil, time.Now().Add(-time.Hour), strings.Repeat("x", 200))),
		withID("9", retryingActivity(t, "ReplayFile", nil, time.Time{}, "sink down")),
	}, running)
	assert.Zero(t, waiting)
	out.Reset()
	printReplays(&out, reps, waiting, running)
	assert.Regexp(t, `^  in flight \(no replay has heartbeated yet\): p0, p1, p2
  waiting to retry replay activity 8 \(attempt 3 due since 1h0m[01]s, no heartbeat yet; last failure: x{99}…\)
  waiting to retry replay activity 9 \(attempt 3, no heartbeat yet; last failure: sink down\)
$`, out.String())

	require.Len(t, reps, 2)
	b, err := json.Marshal(reps[1])
	require.NoError(t, err)
	var rep struct {
		ActivityID  string    `json:"activity_id"`
		Retrying    bool      `json:"retrying"`
		NextAttempt time.Time `json:"next_attempt"`
		LastFailure string    `json:"last_failure"`
	}
	require.NoError(t, json.Unmarshal(b, &rep), string(b))
	assert.Equal(t, "9", rep.ActivityID)
	assert.True(t, rep.Retrying)
	assert.Equal(t, "sink down", rep.LastFailure)
	assert.True(t, rep.NextAttempt.IsZero())
}

// TestReplayPlacedByItsInput: a replay whose retry waits with no
// heartbeat is placed where its input starts it (the input the history
// has): a batch's first partition, at its start position, or a file.
// One whose heartbeat did not decode is not (where it stands is not
// known).
func TestReplayPlacedByItsInput(t *testing.T) {
	input := func(in any) *commonpb.Payloads {
		p, err := converter.GetDefaultDataConverter().ToPayloads(in)
		require.NoError(t, err)
		return p
	}
	running := []string{"p0", "p1", "p2"}
	reps, waiting := replaysInFlight([]*workflowpb.PendingActivityInfo{
		retryingActivity(t, "ReplayPartition", nil, time.Time{}, "sink down"),
		retryingActivity(t, "ReplayPartition", nil, time.Time{}, "sink down"),
		retryingActivity(t, "ReplayFile", nil, time.Time{}, "sink down"),
		retryingActivity(t, "ReplayPartition", map[string]int{"partition": 1}, time.Time{}, "sink down"),
	}, running)
	assert.Zero(t, waiting)
	require.Len(t, reps, 4)
	assert.Equal(t, []bool{false, false, false, true}, []bool{reps[0].undecoded, reps[1].undecoded, reps[2].undecoded, reps[3].undecoded})
	reps[0].readInput("ReplayPartition", input(activities.ReplayPartitionInput{Partition: "p0"}))
	reps[1].readInput("ReplayPartition", input(activities.ReplayPartitionInput{Partition: "p1", Then: []string{"p2"}, Start: parquet.Position{File: "p1/f3", Row: 4}}))
	reps[2].readInput("ReplayFile", input(activities.ReplayFileInput{File: "x.parquet"}))
	var out bytes.Buffer
	printReplays(&out, reps, waiting, running)
	assert.Equal(t, `  waiting to retry p0, at its start (this activity flushed 0 files, 0 rows; attempt 3, last heartbeat -; last failure: sink down)
  waiting to retry p1 at file p1/f3 row 4 (this activity flushed 0 files, 0 rows; attempt 3, last heartbeat -; last failure: sink down)
  waiting to retry x.parquet, at its start (this activity flushed 0 rows; attempt 3, last heartbeat -; last failure: sink down)
  waiting to retry replay activity - (attempt 3, no heartbeat yet; last failure: sink down)
`, out.String())
	assert.Equal(t, 2, reps[1].BatchSize)
}
