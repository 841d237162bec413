package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/workflows"
)

// TestCancelledCoordinatorLeavesItsHandoffsRunning: the handoffs a
// coordinator starts are children that outlive it (parent close policy
// abandon). Cancelling the coordinator (temporal workflow cancel) ends
// its run and leaves a running handoff alone. Before, the handoff was
// started on the coordinator's context, so the cancellation was passed on
// to it: its final round on the old owner was cancelled and so was the
// restore on the new owner, and the handoff ended without moving the
// shard.
func TestCancelledCoordinatorLeavesItsHandoffsRunning(t *testing.T) {
	env := quietSuite().NewTestWorkflowEnvironment()
	r, h := &activities.Rounds{}, &activities.Handoffs{}
	env.RegisterActivity(r)
	env.RegisterActivity(h)
	env.RegisterWorkflow(workflows.CoordinatorWorkflow)
	env.RegisterWorkflow(workflows.HandoffWorkflow)
	// The handoff's final round on w1 takes a minute; the coordinator is
	// cancelled while it runs.
	env.OnActivity(r.CheckpointRound, mock.Anything, mock.MatchedBy(func(in activities.RoundInput) bool { return in.Final })).
		After(time.Minute).Return(activities.RoundResult{Shards: []activities.ShardResult{
		{Shard: "readings/0", Epoch: 1, Status: activities.ShardOK, CheckpointID: 5}}}, nil)
	f := newFakeWorkers()
	env.OnActivity(r.CheckpointRound, mock.Anything, mock.Anything).Return(f.round)
	env.OnActivity(h.Restore, mock.Anything, mock.Anything).Return(activities.RestoreSummary{CheckpointID: 5}, nil)
	env.OnActivity(h.Resume, mock.Anything, mock.Anything).Return(nil)
	handoff := workflows.HandoffWorkflowIDAt("iot", "readings/0", 2)
	var cancelledChildren, cancelledSteps []string
	env.SetOnChildWorkflowCanceledListener(func(info *workflow.Info) {
		cancelledChildren = append(cancelledChildren, info.WorkflowExecution.ID)
	})
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.WorkflowExecution.ID == handoff {
			cancelledSteps = append(cancelledSteps, info.ActivityType.Name)
		}
	})
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	moved := announceAt(env, 2*time.Second, announcement("w2", 2, "readings/0"))
	env.RegisterDelayedCallback(env.CancelWorkflow, 5*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	require.True(t, env.IsWorkflowCompleted())
	var ce *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &ce)
	require.True(t, moved.completed)
	require.Len(t, moved.result.(workflows.AnnounceResult).Previous, 1)
	assert.Empty(t, cancelledChildren, "cancelling the coordinator cancelled the handoff it started")
	assert.Empty(t, cancelledSteps, "cancelling the coordinator cancelled steps of the handoff %s", handoff)
}
