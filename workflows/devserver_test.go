package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/testsuite/faults"

	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestHandoffDeadNewOwnerOnDevServer: schedule-to-start deadlines are
// enforced by the server (the test environment does not simulate them),
// so this runs on the real dev server. A handoff whose new owner never
// polls its task queue — it died right after announcing itself — fails
// the restore step within StepTimeout with a schedule-to-start timeout
// instead of holding the saga for ever; so does a final checkpoint whose
// old owner is gone, which is skipped and recorded.
func TestHandoffDeadNewOwnerOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.HandoffWorkflow)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()
	var stages fakeactivities.Stages
	live := worker.New(c, workflows.WorkerTaskQueue("w1"), worker.Options{})
	stages.Register(live)
	require.NoError(t, live.Start())
	defer live.Stop()

	const step = 2 * time.Second
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.HandoffWorkflowID("iot", "readings-7"), TaskQueue: workflows.ControlTaskQueue},
		workflows.HandoffWorkflow, workflows.HandoffInput{
			Pipeline: "iot", Shard: "readings-7", StepTimeout: step,
			From: &workflows.Owner{WorkerID: "gone", TaskQueue: workflows.WorkerTaskQueue("gone"), Epoch: 1},
			To:   &workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 2},
		})
	require.NoError(t, err)
	var st workflows.HandoffState
	require.NoError(t, run.Get(ctx, &st), "a live new owner completes the handoff")
	require.Equal(t, workflows.StepDone, st.Step)
	require.Contains(t, st.FinalCheckpointSkipped, "previous owner did not answer", "the silent old owner's step times out and is skipped")

	started := time.Now()
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.HandoffWorkflowID("iot", "readings-8"), TaskQueue: workflows.ControlTaskQueue},
		workflows.HandoffWorkflow, workflows.HandoffInput{
			Pipeline: "iot", Shard: "readings-8", StepTimeout: step, FromDead: true,
			From: &workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 1},
			To:   &workflows.Owner{WorkerID: "dead-on-arrival", TaskQueue: workflows.WorkerTaskQueue("dead-on-arrival"), Epoch: 2},
		})
	require.NoError(t, err)
	err = run.Get(ctx, &st)
	require.Error(t, err, "a handoff to a new owner that never polls must fail")
	var te *temporal.TimeoutError
	require.True(t, errors.As(err, &te), "want a timeout, got %v", err)
	require.Equal(t, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, te.TimeoutType())
	require.ErrorContains(t, err, `restore on "dead-on-arrival"`)
	t.Logf("handoff to a dead new owner failed after %s: %v", time.Since(started).Round(time.Millisecond), err)
	v, err := c.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryStatus)
	require.NoError(t, err)
	require.NoError(t, v.Get(&st))
	require.Equal(t, workflows.StepRestore, st.Step)
}

var quietLog = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// TestHandoffSurvivesControlWorkerCrash: the worker running the handoff
// saga dies mid-saga (its connection to Temporal is cut while the new
// owner restores). Another control worker picks the saga up from its
// history — a replay with this code, so it is also a determinism check —
// and finishes it; no step runs twice, and the shard ends with one owner.
func TestHandoffSurvivesControlWorkerCrash(t *testing.T) {
	srv := temporaltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var finals, restores, resumes atomic.Int32
	restoring := make(chan struct{})
	release := make(chan struct{})
	reg := func(w worker.Worker, name string, fn any) {
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	old := worker.New(srv.Client, workflows.WorkerTaskQueue("w1"), worker.Options{})
	reg(old, "FinalCheckpoint", func(context.Context, activities.ShardRef) (activities.CheckpointSummary, error) {
		finals.Add(1)
		return activities.CheckpointSummary{CheckpointID: 9, Epoch: 1, Cursor: "readings/3@120"}, nil
	})
	require.NoError(t, old.Start())
	defer old.Stop()
	next := worker.New(srv.Client, workflows.WorkerTaskQueue("w2"), worker.Options{})
	reg(next, "Restore", func(ctx context.Context, _ activities.ShardRef) (activities.RestoreSummary, error) {
		if restores.Add(1) == 1 {
			close(restoring)
		}
		select {
		case <-release:
		case <-ctx.Done():
			return activities.RestoreSummary{}, ctx.Err()
		}
		return activities.RestoreSummary{CheckpointID: 9, Epoch: 1, Cursor: "readings/3@120"}, nil
	})
	reg(next, "Resume", func(context.Context, activities.ShardRef) error { resumes.Add(1); return nil })
	require.NoError(t, next.Start())
	defer next.Stop()

	// Control worker A reaches Temporal through a connection the test cuts.
	var link faults.Net
	ca, err := client.Dial(client.Options{
		HostPort: srv.HostPort, Identity: "control-a", Logger: quietLog,
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithContextDialer(link.GRPCDial)}},
	})
	require.NoError(t, err)
	defer ca.Close()
	a := worker.New(ca, workflows.ControlTaskQueue, worker.Options{StickyScheduleToStartTimeout: time.Second})
	a.RegisterWorkflow(workflows.HandoffWorkflow)
	require.NoError(t, a.Start())

	id := workflows.HandoffWorkflowID("iot", "readings-3")
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue},
		workflows.HandoffWorkflow, workflows.HandoffInput{
			Pipeline: "iot", Shard: "readings-3", StepTimeout: 30 * time.Second,
			From: &workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 1},
			To:   &workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 2},
		})
	require.NoError(t, err)
	select {
	case <-restoring:
	case <-ctx.Done():
		t.Fatal("the saga never reached the restore step")
	}
	link.Cut() // control worker A is gone mid-saga
	defer a.Stop()

	b, err := client.Dial(client.Options{HostPort: srv.HostPort, Identity: "control-b", Logger: quietLog})
	require.NoError(t, err)
	defer b.Close()
	wb := worker.New(b, workflows.ControlTaskQueue, worker.Options{})
	wb.RegisterWorkflow(workflows.HandoffWorkflow)
	require.NoError(t, wb.Start())
	defer wb.Stop()
	close(release)

	var st workflows.HandoffState
	require.NoError(t, run.Get(ctx, &st))
	require.Equal(t, workflows.StepDone, st.Step)
	require.NotNil(t, st.FinalCheckpoint)
	require.NotNil(t, st.Restored)
	require.Equal(t, st.FinalCheckpoint.CheckpointID, st.Restored.CheckpointID)
	require.Equal(t, int32(1), finals.Load(), "final checkpoint ran more than once")
	require.Equal(t, int32(1), restores.Load(), "restore ran more than once")
	require.Equal(t, int32(1), resumes.Load(), "resume ran more than once")

	// The saga was finished by control worker B.
	var last string
	for _, ev := range temporaltest.History(t, ctx, srv.Client, id, run.GetRunID()) {
		if c := ev.GetWorkflowTaskCompletedEventAttributes(); c != nil {
			last = c.GetIdentity()
		}
	}
	require.Equal(t, "control-b", last, "the saga did not move to the surviving control worker")
}
