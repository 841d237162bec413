package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/workflows"
)

// TestCheckpointNowWhileContinuingAsNew: the coordinator decides to
// continue as new after round 1 while the start of a handoff (from an
// announcement that moved the round's only shard) is not confirmed yet,
// and a checkpoint-now request arrives in that window. The request's round
// runs, and the coordinator continues as new after it. Bug: the request
// waited for round 2 while continueAsNew waited for every handler to
// finish, so neither happened: no round ran (nor did the coordinator
// continue as new) until it was stopped, which failed the request.
func TestCheckpointNowWhileContinuingAsNew(t *testing.T) {
	env, _ := slowRoundsEnv(10 * time.Minute)
	startHandoff := make(chan struct{})
	// The handoff's start is confirmed once startHandoff is closed.
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Run(func(mock.Arguments) { <-startHandoff }).
		Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	// Round 1 starts at 10s; at 15s w2 takes readings/0 over: w1's share
	// is cancelled, round 1 ends, and the coordinator (ContinueAsNewAfter
	// 1) waits for the handoff's start before continuing as new.
	announceAt(env, 15*time.Second, announcement("w2", 2, "readings/0"))
	var now *update
	env.SetOnActivityCanceledListener(func(*activity.Info) {
		now = sendUpdate(env, workflows.UpdateCheckpointNow, "now", workflows.CheckpointNowRequest{Reason: "operator"})
		close(startHandoff)
	})
	stopCoordinatorAfter(env, time.Hour)
	in := coordIn
	in.ContinueAsNewAfter = 1
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NotNil(t, now)
	require.True(t, now.completed, "checkpoint now never completed")
	require.NoError(t, now.err, "the checkpoint-now request was not served")
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can, "the coordinator continues as new after the requested round, before the stop at +1h")
	var next workflows.CoordinatorInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	assert.Equal(t, uint64(2), next.State.Round, "round 1, then the requested round 2, then continue-as-new")
}

// TestHandoffRunningAtContinueAsNewSaysSo: a handoff still running when
// the coordinator continues as new is not followed by the next run; its
// row said "started" until the shard moved again. It says the handoff
// was still running, and which workflow holds its result.
func TestHandoffRunningAtContinueAsNewSaysSo(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).After(time.Hour).
		Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	announceAt(env, 5*time.Second, announcement("w2", 2, "readings/0"))
	in := coordIn
	in.ContinueAsNewAfter = 2
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var next workflows.CoordinatorInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	row := rowOf(t, *next.State, "readings/0")
	id := workflows.HandoffWorkflowIDAt("iot", "readings/0", 2)
	assert.Equal(t, "w1@1 → w2@2: still running at the coordinator's continue-as-new; its result is in workflow "+id, row.Handoff)
}
