package workflows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// startMemoryWorkers runs one worker per id on its own queue with the real
// Rounds activity over ms, and its handoff side.
func startMemoryWorkers(t testing.TB, c client.Client, ms *fakeactivities.MemoryShards, ids ...string) {
	t.Helper()
	for _, id := range ids {
		w := worker.New(c, workflows.WorkerTaskQueue(id), worker.Options{})
		w.RegisterActivity(&activities.Rounds{Host: ms.Hosts[id]})
		w.RegisterActivity(&activities.Handoffs{Host: ms.HandoffHost(id)})
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
}

// announceAll announces every worker's shards (starting the coordinator)
// and returns the coordinator's first run id.
func announceAll(t testing.TB, ctx context.Context, c client.Client, in workflows.CoordinatorInput, ms *fakeactivities.MemoryShards) string {
	t.Helper()
	var first string
	for w, shards := range ms.Announcements() {
		res, err := workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: w, TaskQueue: workflows.WorkerTaskQueue(w), Shards: shards})
		require.NoError(t, err)
		first = res.Coordinator
	}
	return first
}

// startControlWorker runs an unversioned control-queue worker with every
// workflow registered.
func startControlWorker(t testing.TB, c client.Client) {
	t.Helper()
	w := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	workflows.Register(w)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
}

func coordinatorStatus(t *testing.T, c client.Client, pipeline string) workflows.CoordinatorStatus {
	t.Helper()
	v, err := c.QueryWorkflow(context.Background(), workflows.CoordinatorWorkflowID(pipeline), "", workflows.QueryStatus)
	require.NoError(t, err)
	var st workflows.CoordinatorStatus
	require.NoError(t, v.Get(&st))
	return st
}

func coordinatorShards(t *testing.T, c client.Client, pipeline string) []workflows.ShardRow {
	t.Helper()
	v, err := c.QueryWorkflow(context.Background(), workflows.CoordinatorWorkflowID(pipeline), "", workflows.QueryShards)
	require.NoError(t, err)
	var rows []workflows.ShardRow
	require.NoError(t, v.Get(&rows))
	return rows
}

// currentDetails reads a workflow's current details as the web UI does
// (the built-in metadata query).
func currentDetails(t *testing.T, c client.Client, id string) string {
	t.Helper()
	v, err := c.QueryWorkflow(context.Background(), id, "", "__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	return md.GetCurrentDetails()
}

// timerSummaries returns the summaries of the timers in a workflow's
// history, as the web UI lists them.
func timerSummaries(t *testing.T, c client.Client, id string) []string {
	t.Helper()
	var out []string
	for _, e := range temporaltest.History(t, context.Background(), c, id, "") {
		if e.GetEventType() != enumspb.EVENT_TYPE_TIMER_STARTED || e.GetUserMetadata().GetSummary() == nil {
			continue
		}
		var s string
		require.NoError(t, converter.GetDefaultDataConverter().FromPayload(e.GetUserMetadata().GetSummary(), &s))
		out = append(out, s)
	}
	return out
}

func shardRow(rows []workflows.ShardRow, shard streaming.ShardID) workflows.ShardRow {
	i := slices.IndexFunc(rows, func(r workflows.ShardRow) bool { return r.Shard == shard })
	if i < 0 {
		return workflows.ShardRow{}
	}
	return rows[i]
}

// recordCoordinator plays a coordinator's life on the dev server — workers
// announce (update-with-start), rounds run on the interval and on
// checkpoint now, a stale announcement is refused, a shard moves (handoff
// with a final round), a worker dies (its coordinated lease tells the
// coordinator) and its shard is taken over, then a stop — and returns the
// runs to record.
func recordCoordinator(t *testing.T, ctx context.Context, c client.Client) map[string]client.WorkflowRun {
	t.Helper()
	ms, err := fakeactivities.NewMemoryShards("iot", 4, 16, 24, memory.New(), "c1", "c2")
	require.NoError(t, err)
	startMemoryWorkers(t, c, ms, "c1", "c2")
	in := workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(300 * time.Millisecond), ReachTimeout: activities.Duration(time.Second)}
	announceAll(t, ctx, c, in, ms)
	waitFor(t, func() bool { return coordinatorStatus(t, c, "iot").Complete >= 2 })

	ms.Touch()
	sum, err := workflows.CheckpointRoundNow(ctx, c, "iot", "record")
	require.NoError(t, err)
	assert.Equal(t, 4, sum.Shards)
	assert.Equal(t, 4, sum.OK)
	assert.Equal(t, 2, sum.Workers)
	assert.Equal(t, "checkpoint now: record", sum.Reason)

	// iot/0 is c1's at epoch 1: c2 at the same epoch is refused.
	_, err = workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: "c2", TaskQueue: workflows.WorkerTaskQueue("c2"),
		Shards: []activities.ShardEpoch{{Shard: "iot/0", Epoch: 1}}})
	require.ErrorIs(t, err, workflows.ErrStaleAnnouncement)
	assert.Contains(t, err.Error(), `worker "c1" owns it at epoch 1`)

	// A cooperative rebalance moves iot/0 to c2.
	e, err := ms.Move(ctx, 0, "c2")
	require.NoError(t, err)
	res, err := workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: "c2", TaskQueue: workflows.WorkerTaskQueue("c2"),
		Shards: []activities.ShardEpoch{{Shard: "iot/0", Epoch: e}}})
	require.NoError(t, err)
	require.Len(t, res.Previous, 1)
	assert.Equal(t, "c1", res.Previous[0].Owner.WorkerID)
	move := c.GetWorkflow(ctx, res.Previous[0].Handoff, "")
	var hs workflows.HandoffState
	require.NoError(t, move.Get(ctx, &hs))
	require.NotNil(t, hs.FinalCheckpoint, "final round: %s", hs.FinalCheckpointSkipped)
	assert.Equal(t, streaming.Epoch(1), hs.FinalCheckpoint.Epoch)
	// The restore finds the final checkpoint, or a newer one: a round of
	// the coordinator may checkpoint the shard on its new owner, which
	// announced it, before the handoff's restore step runs.
	assert.GreaterOrEqual(t, hs.Restored.CheckpointID, hs.FinalCheckpoint.CheckpointID)

	// c2 announces as its run c2-run-2; a worker-gone notice about its
	// earlier run (a process replaced under its id) is ignored (the
	// history records the ignore-worker-gone-of-an-earlier-run marker).
	_, err = workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: "c2", TaskQueue: workflows.WorkerTaskQueue("c2"),
		Shards: []activities.ShardEpoch{{Shard: "iot/0", Epoch: e}}, Instance: "c2-run-2"})
	require.NoError(t, err)
	require.NoError(t, c.SignalWorkflow(ctx, workflows.CoordinatorWorkflowID("iot"), "", workflows.SignalWorkerGone,
		workflows.WorkerGone{WorkerID: "c2", Instance: "c2-run-1", Reason: "record"}))
	for _, w := range coordinatorStatus(t, c, "iot").Workers {
		assert.Equal(t, workflows.WorkerLive, w.Status, w.WorkerID)
	}

	// A worker that announced readings-1 dies (nothing polls its queue any
	// more): its rounds are unreachable, then its coordinated lease tells
	// the coordinator (the stand-in lease of DeadWorker heartbeats once).
	_, err = workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: fakeactivities.DeadWorker, TaskQueue: workflows.WorkerTaskQueue("nobody-polls"),
		Shards: []activities.ShardEpoch{{Shard: "readings-1", Epoch: 2}}})
	require.NoError(t, err)
	lease, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.LeaseWorkflowID("dead-coordinated"), TaskQueue: workflows.ControlTaskQueue},
		workflows.LeaseWorkflow, workflows.LeaseInput{WorkerID: fakeactivities.DeadWorker, TaskQueue: workflows.WorkerTaskQueue(fakeactivities.DeadWorker),
			HeartbeatTimeout: 2 * time.Second, Coordinated: true})
	require.NoError(t, err)
	var ls workflows.LeaseState
	require.NoError(t, lease.Get(ctx, &ls))
	assert.Equal(t, []string{workflows.CoordinatorWorkflowID("iot")}, ls.Told)
	waitFor(t, func() bool {
		return shardRow(coordinatorShards(t, c, "iot"), "readings-1").Status == workflows.ShardOwnerGone
	})

	st := coordinatorStatus(t, c, "iot")
	assert.Equal(t, workflows.BreakerClosed, st.Breaker)
	rows := coordinatorShards(t, c, "iot")
	row := shardRow(rows, "iot/0")
	assert.Equal(t, "c2", row.Owner.WorkerID)
	assert.Contains(t, row.Handoff, "c1@1 → c2@2")
	desc, err := c.DescribeWorkflow(ctx, workflows.CoordinatorWorkflowID("iot"), "")
	require.NoError(t, err)
	summary, err := desc.GetStaticSummary()
	require.NoError(t, err)
	assert.Contains(t, summary, "checkpoint coordinator of iot")
	details := currentDetails(t, c, workflows.CoordinatorWorkflowID("iot"))
	assert.True(t, strings.HasPrefix(details, "round "), "current details: %q", details)

	require.NoError(t, c.SignalWorkflow(ctx, workflows.CoordinatorWorkflowID("iot"), "", workflows.SignalStop, workflows.StopRequest{Reason: "record"}))
	run := c.GetWorkflow(ctx, workflows.CoordinatorWorkflowID("iot"), "")
	var final workflows.CoordinatorState
	require.NoError(t, run.Get(ctx, &final))
	assert.GreaterOrEqual(t, final.Complete, uint64(3))
	return map[string]client.WorkflowRun{"coordinator": run, "handoff-final-round": move, "lease-coordinated": lease}
}

// TestCoordinatorHistoryTellsEachRound: the web UI's first screen is a
// workflow's history, where the coordinator's current details are a tab
// away; the timer before each next round carries the last round's story
// as its summary, so the history reads round by round.
func TestCoordinatorHistoryTellsEachRound(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startControlWorker(t, c)
	ms, err := fakeactivities.NewMemoryShards("iot", 4, 8, 16, memory.New(), "live")
	require.NoError(t, err)
	startMemoryWorkers(t, c, ms, "live")
	// An interval a round fits in even on a loaded machine: a round that
	// overruns it starts the next at once, with no timer to carry the
	// summary (with 1s, once, under load, none did).
	in := workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(3 * time.Second)}
	announceAll(t, ctx, c, in, ms)
	waitFor(t, func() bool { return coordinatorStatus(t, c, "iot").Round >= 2 })

	var told []string
	for _, s := range timerSummaries(t, c, workflows.CoordinatorWorkflowID("iot")) {
		if strings.HasPrefix(s, "round ") {
			told = append(told, s)
		}
	}
	require.NotEmpty(t, told, "no timer tells a round's story: %q", timerSummaries(t, c, workflows.CoordinatorWorkflowID("iot")))
	assert.Regexp(t, `^round \d+: 1 workers, 4 shards, .*, 0 failed; next at \d\d:\d\d:\d\d$`, told[0])
}

// TestCoordinatorUnreachableWorkerOnDevServer: schedule-to-start timeouts
// come from the server (the test environment does not simulate them). A
// worker that announced shards and stopped polling is unreachable in every
// round — never a storage failure, the breaker stays closed — and the live
// worker's shards are checkpointed each round all the same. Once the dead
// worker's shard is announced by its next owner, the first round that
// starts afterwards checkpoints it there.
func TestCoordinatorUnreachableWorkerOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startControlWorker(t, c)

	ms, err := fakeactivities.NewMemoryShards("iot", 4, 8, 16, memory.New(), "live", "gone")
	require.NoError(t, err)
	startMemoryWorkers(t, c, ms, "live") // "gone" never polls
	in := workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(500 * time.Millisecond), ReachTimeout: activities.Duration(time.Second),
		BreakerThreshold: 2}
	announceAll(t, ctx, c, in, ms)
	waitFor(t, func() bool { return coordinatorStatus(t, c, "iot").Round >= 4 })
	st := coordinatorStatus(t, c, "iot")
	assert.Equal(t, workflows.BreakerClosed, st.Breaker, "a dead worker does not open the breaker")
	assert.Zero(t, st.Failed)
	require.NotNil(t, st.Last)
	assert.Equal(t, 2, st.Last.Unreachable)
	assert.Equal(t, 2, st.Last.OK)
	for _, w := range st.Workers {
		if w.WorkerID == "gone" {
			assert.Equal(t, workflows.WorkerUnreachable, w.Status)
		}
	}

	// The group gives iot/1 ("gone"'s) to "live" at epoch 2 (no final
	// checkpoint: "gone" cannot take one).
	e, err := ms.Move(ctx, 1, "live")
	require.NoError(t, err)
	announced := coordinatorStatus(t, c, "iot").Round
	res, err := workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: "live", TaskQueue: workflows.WorkerTaskQueue("live"),
		Shards: []activities.ShardEpoch{{Shard: "iot/1", Epoch: e}}})
	require.NoError(t, err)
	require.Len(t, res.Previous, 1)
	first, err := c.DescribeWorkflow(ctx, workflows.CoordinatorWorkflowID("iot"), "")
	require.NoError(t, err)
	assert.Equal(t, first.RawResponse.GetWorkflowExecutionInfo().GetFirstRunId(), res.Coordinator, "the coordinator's chain of runs")
	waitFor(t, func() bool {
		r := shardRow(coordinatorShards(t, c, "iot"), "iot/1")
		return r.Status == workflows.ShardOK && r.Owner.WorkerID == "live"
	})
	row := shardRow(coordinatorShards(t, c, "iot"), "iot/1")
	assert.LessOrEqual(t, row.Round, announced+2, "checkpointed on its new owner by the first round that started after the announcement")
	t.Logf("announced during round %d, first checkpoint on the new owner in round %d", announced, row.Round)
	require.NoError(t, c.SignalWorkflow(ctx, workflows.CoordinatorWorkflowID("iot"), "", workflows.SignalStop, nil))
}
