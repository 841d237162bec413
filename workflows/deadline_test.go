package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

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
