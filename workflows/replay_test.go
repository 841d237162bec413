package workflows_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// historyDir holds the recorded histories, one folder per release
// (`make record-histories RELEASE=...` adds a folder; it never overwrites
// one): every release's histories must keep replaying, because workflows
// started by that release may still be running when the next is deployed.
const historyDir = "testdata/histories"

func newReplayer() worker.WorkflowReplayer {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflow(workflows.CoordinatorWorkflow)
	r.RegisterWorkflow(workflows.HandoffWorkflow)
	r.RegisterWorkflow(workflows.LeaseWorkflow)
	r.RegisterWorkflow(workflows.BackfillWorkflow)
	return r
}

// TestReplayCommittedHistories replays histories recorded from a real dev
// server (see TestRecordHistoriesOnDevServer): a change that makes a
// workflow non-deterministic against histories already in production
// fails here.
func TestReplayCommittedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(historyDir, "*", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 9, "expected committed histories of every workflow under %s", historyDir)
	for _, f := range files {
		rel, _ := filepath.Rel(historyDir, f)
		t.Run(rel, func(t *testing.T) {
			require.NoError(t, newReplayer().ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}

// TestRecordHistoriesOnDevServer runs every workflow on a real dev server
// against stand-in activities (the coordinator's rounds against the real
// Rounds activity over in-memory shards) and replays the histories it
// produced. With TFLO_RECORD_HISTORIES=1 it also writes them to
// testdata/histories/$TFLO_HISTORY_RELEASE, a folder that must not exist
// yet: histories are added per release, never overwritten (how the
// committed histories were made: `make record-histories`).
func TestRecordHistoriesOnDevServer(t *testing.T) {
	record := os.Getenv("TFLO_RECORD_HISTORIES") == "1"
	release := os.Getenv("TFLO_HISTORY_RELEASE")
	if record {
		require.NotEmpty(t, release, "TFLO_HISTORY_RELEASE names the folder the histories go to (make record-histories RELEASE=...)")
		require.NotContains(t, release, string(filepath.Separator), "release name")
		_, err := os.Stat(filepath.Join(historyDir, release))
		require.True(t, os.IsNotExist(err), "histories of release %q are recorded already (%s): they are never overwritten; record a new release", release, filepath.Join(historyDir, release))
	}
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var stages fakeactivities.Stages
	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.CoordinatorWorkflow)
	ctl.RegisterWorkflow(workflows.HandoffWorkflow)
	ctl.RegisterWorkflow(workflows.LeaseWorkflow)
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	for _, q := range []string{workflows.WorkerTaskQueue("w1"), workflows.WorkerTaskQueue("w2"), workflows.WorkerTaskQueue(fakeactivities.DeadWorker), workflows.BackfillTaskQueue} {
		w := worker.New(c, q, worker.Options{})
		stages.Register(w)
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)

	start := func(id string, wf any, in any) client.WorkflowRun {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue}, wf, in)
		require.NoError(t, err)
		return run
	}

	// Handoff between two live owners.
	hoRun := start(workflows.HandoffWorkflowID("iot", "readings-0"), workflows.HandoffWorkflow, workflows.HandoffInput{
		Pipeline: "iot", Shard: "readings-0",
		From: &workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 1},
		To:   &workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 2},
	})
	var hoState workflows.HandoffState
	require.NoError(t, hoRun.Get(ctx, &hoState))
	assert.Equal(t, workflows.StepDone, hoState.Step)

	// Lease of a worker that dies: its heartbeat times out, the handoff
	// starts, and waits for the new owner, who announces itself.
	leaseRun := start(workflows.LeaseWorkflowID("dead"), workflows.LeaseWorkflow, workflows.LeaseInput{
		WorkerID: "dead", TaskQueue: workflows.WorkerTaskQueue(fakeactivities.DeadWorker), HeartbeatTimeout: 2 * time.Second,
	})
	var leaseState workflows.LeaseState
	require.NoError(t, leaseRun.Get(ctx, &leaseState))
	assert.Equal(t, workflows.LeaseDead, leaseState.Status)
	require.Equal(t, []string{workflows.HandoffWorkflowID("iot", "readings-1")}, leaseState.Handoffs)
	require.NoError(t, c.SignalWorkflow(ctx, leaseState.Handoffs[0], "", workflows.SignalOwner,
		workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 3}))
	var orphan workflows.HandoffState
	require.NoError(t, c.GetWorkflow(ctx, leaseState.Handoffs[0], "").Get(ctx, &orphan))
	assert.Equal(t, "previous owner is dead", orphan.FinalCheckpointSkipped)

	// A worker declared dead while alive answers its own handoff: nothing
	// moves (the history carries the handoff-unmoved version marker).
	w1 := workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 5}
	unmovedRun := start(workflows.HandoffWorkflowID("iot", "readings-2"), workflows.HandoffWorkflow, workflows.HandoffInput{
		Pipeline: "iot", Shard: "readings-2", From: &w1, FromDead: true, To: &w1,
	})
	var unmoved workflows.HandoffState
	require.NoError(t, unmovedRun.Get(ctx, &unmoved))
	assert.NotEmpty(t, unmoved.Unmoved)

	// Backfill of a three-file archive in a window of two.
	bfRun := start(workflows.BackfillWorkflowID("record"), workflows.BackfillWorkflow, workflows.BackfillInput{
		Name: "record", Location: "file:///archive", Sink: "influx:replay/autogen", Window: 2,
	})
	var bf workflows.BackfillProgress
	require.NoError(t, bfRun.Get(ctx, &bf))
	assert.Equal(t, 3, bf.FilesDone)

	runs := map[string]client.WorkflowRun{
		"handoff": hoRun, "lease-dead": leaseRun,
		"handoff-orphan": c.GetWorkflow(ctx, leaseState.Handoffs[0], ""), "backfill": bfRun, "handoff-unmoved": unmovedRun,
	}
	maps.Copy(runs, recordCoordinator(t, ctx, c))

	dir := t.TempDir()
	if record {
		dir = filepath.Join(historyDir, release)
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	for name, run := range runs {
		hist := fetchHistory(t, c, run)
		b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
		require.NoError(t, err)
		path := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		require.NoError(t, newReplayer().ReplayWorkflowHistoryFromJSONFile(nil, path), "replay %s", name)
	}
}

func fetchHistory(t *testing.T, c client.Client, run client.WorkflowRun) *historypb.History {
	t.Helper()
	h := &historypb.History{Events: temporaltest.History(t, context.Background(), c, run.GetID(), run.GetRunID())}
	require.NotEmpty(t, h.Events)
	return h
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 50*time.Millisecond)
}
