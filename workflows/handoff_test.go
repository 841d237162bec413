package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

var (
	oldOwner = workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 3}
	newOwner = workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 4}
)

func newHandoffEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *activities.Handoffs, *[]string) {
	t.Helper()
	env := quietSuite().NewTestWorkflowEnvironment()
	a := &activities.Handoffs{}
	env.RegisterActivity(a)
	env.RegisterWorkflow(workflows.HandoffWorkflow)
	var calls []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		calls = append(calls, info.ActivityType.Name+"@"+info.TaskQueue)
	})
	return env, a, &calls
}

func handoffResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.HandoffState {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	logPanic(t, env.GetWorkflowError())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.HandoffState
	require.NoError(t, env.GetWorkflowResult(&st))
	return st
}

func TestHandoffMovesShardInOrder(t *testing.T) {
	env, a, calls := newHandoffEnv(t)
	env.OnActivity(a.FinalCheckpoint, mock.Anything, activities.ShardRef{Pipeline: "p", Shard: "s", Epoch: 3}).
		Return(activities.CheckpointSummary{CheckpointID: 12, Epoch: 3, Cursor: "t/0@99", Bytes: 4096}, nil)
	env.OnActivity(a.Restore, mock.Anything, activities.ShardRef{Pipeline: "p", Shard: "s", Epoch: 4}).
		Return(activities.RestoreSummary{CheckpointID: 12, Epoch: 3, Cursor: "t/0@99", Bytes: 4096}, nil)
	env.OnActivity(a.Resume, mock.Anything, activities.ShardRef{Pipeline: "p", Shard: "s", Epoch: 4}).Return(nil)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &newOwner})
	st := handoffResult(t, env)
	assert.Equal(t, workflows.StepDone, st.Step)
	require.NotNil(t, st.FinalCheckpoint)
	assert.Equal(t, uint64(12), st.FinalCheckpoint.CheckpointID)
	require.NotNil(t, st.Restored)
	assert.Equal(t, uint64(12), st.Restored.CheckpointID)
	assert.Equal(t, []string{
		"FinalCheckpoint@" + oldOwner.TaskQueue,
		"Restore@" + newOwner.TaskQueue,
		"Resume@" + newOwner.TaskQueue,
	}, *calls)
}

func TestHandoffSkipsDeadOldOwner(t *testing.T) {
	env, a, calls := newHandoffEnv(t)
	env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(activities.RestoreSummary{CheckpointID: 9}, nil)
	env.OnActivity(a.Resume, mock.Anything, mock.Anything).Return(nil)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, FromDead: true, To: &newOwner})
	st := handoffResult(t, env)
	assert.Equal(t, "previous owner is dead", st.FinalCheckpointSkipped)
	assert.Nil(t, st.FinalCheckpoint)
	assert.Equal(t, []string{"Restore@" + newOwner.TaskQueue, "Resume@" + newOwner.TaskQueue}, *calls)
}

func TestHandoffOldOwnerUnreachable(t *testing.T) {
	env, a, _ := newHandoffEnv(t)
	env.OnActivity(a.FinalCheckpoint, mock.Anything, mock.Anything).Return(activities.CheckpointSummary{},
		temporal.NewNonRetryableApplicationError("gone", activities.ErrTypeNotOwner, nil))
	env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(activities.RestoreSummary{CheckpointID: 9}, nil)
	env.OnActivity(a.Resume, mock.Anything, mock.Anything).Return(nil)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &newOwner})
	st := handoffResult(t, env)
	assert.Contains(t, st.FinalCheckpointSkipped, "did not answer")
	assert.Equal(t, workflows.StepDone, st.Step, "the new owner restores from the last durable checkpoint")
}

func TestHandoffWaitsForNewOwnerSignal(t *testing.T) {
	env, a, _ := newHandoffEnv(t)
	var restoredAt []streaming.Epoch
	env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ref activities.ShardRef) (activities.RestoreSummary, error) {
			restoredAt = append(restoredAt, ref.Epoch)
			return activities.RestoreSummary{CheckpointID: 1}, nil
		})
	env.OnActivity(a.Resume, mock.Anything, mock.Anything).Return(nil)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalOwner, newOwner) }, 3*time.Minute)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, FromDead: true})
	st := handoffResult(t, env)
	require.NotNil(t, st.To)
	assert.Equal(t, "w2", st.To.WorkerID)
	assert.Equal(t, []streaming.Epoch{4}, restoredAt)
}

func TestHandoffFailures(t *testing.T) {
	t.Run("no new owner in time", func(t *testing.T) {
		env, _, _ := newHandoffEnv(t)
		env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", OwnerWait: time.Minute})
		require.True(t, env.IsWorkflowCompleted())
		err := env.GetWorkflowError()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no new owner announced itself within 1m0s")
	})
	t.Run("epoch does not increase", func(t *testing.T) {
		env, a, _ := newHandoffEnv(t)
		env.OnActivity(a.FinalCheckpoint, mock.Anything, mock.Anything).Return(activities.CheckpointSummary{CheckpointID: 1}, nil)
		stale := newOwner
		stale.Epoch = 3
		env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &stale})
		err := env.GetWorkflowError()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "has epoch 3, not above the old owner's 3")
	})
	t.Run("restore retried until it succeeds", func(t *testing.T) {
		env, a, _ := newHandoffEnv(t)
		env.OnActivity(a.FinalCheckpoint, mock.Anything, mock.Anything).Return(activities.CheckpointSummary{CheckpointID: 5}, nil)
		attempts := 0
		env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(
			func(context.Context, activities.ShardRef) (activities.RestoreSummary, error) {
				attempts++
				if attempts < 3 {
					return activities.RestoreSummary{}, errors.New("state store timeout")
				}
				return activities.RestoreSummary{CheckpointID: 5}, nil
			})
		env.OnActivity(a.Resume, mock.Anything, mock.Anything).Return(nil)
		env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &newOwner})
		st := handoffResult(t, env)
		assert.Equal(t, 3, attempts)
		assert.Equal(t, workflows.StepDone, st.Step)
	})
	t.Run("restore older than the final checkpoint", func(t *testing.T) {
		env, a, _ := newHandoffEnv(t)
		env.OnActivity(a.FinalCheckpoint, mock.Anything, mock.Anything).Return(activities.CheckpointSummary{CheckpointID: 8}, nil)
		env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(activities.RestoreSummary{CheckpointID: 7}, nil)
		env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &newOwner})
		err := env.GetWorkflowError()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "restored checkpoint 7, older than the final checkpoint 8")
	})
}

// TestHandoffUnmovedWhenOwnerAnswersItself: a worker the lease workflow
// declared dead while it was alive still owns the shard at the same epoch
// and answers the handoff; the saga moves nothing and runs no step.
func TestHandoffUnmovedWhenOwnerAnswersItself(t *testing.T) {
	env, _, calls := newHandoffEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalOwner, oldOwner)
	}, time.Second)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, FromDead: true})
	st := handoffResult(t, env)
	assert.Equal(t, workflows.StepDone, st.Step)
	assert.Contains(t, st.Unmoved, `worker "w1" still owns the shard at epoch 3`)
	assert.Nil(t, st.Restored)
	assert.Empty(t, *calls, "no step runs when nothing moves")

	// The same owner at a higher epoch (it lost and regained the shard)
	// is a move: restore and resume run on it.
	env, a, calls := newHandoffEnv(t)
	again := oldOwner
	again.Epoch = 5
	env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(activities.RestoreSummary{CheckpointID: 7, Epoch: 3}, nil)
	env.OnActivity(a.Resume, mock.Anything, mock.Anything).Return(nil)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &again})
	st = handoffResult(t, env)
	assert.Empty(t, st.Unmoved)
	assert.Equal(t, []string{"Restore@" + again.TaskQueue, "Resume@" + again.TaskQueue}, *calls)
}

// TestHandoffFinalCheckpointIsARound: a coordinator's handoff takes the old
// owner's final checkpoint as a one-worker round (the same activity every
// round runs) and announces nothing (the coordinator knows the new owner).
func TestHandoffFinalCheckpointIsARound(t *testing.T) {
	env, a, calls := newHandoffEnv(t)
	r := &activities.Rounds{}
	env.RegisterActivity(r)
	var asked activities.RoundInput
	env.OnActivity(r.CheckpointRound, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RoundInput) (activities.RoundResult, error) {
		asked = in
		return activities.RoundResult{WorkerID: in.WorkerID, Shards: []activities.ShardResult{{Shard: "s", Epoch: 3, Status: activities.ShardOK,
			CheckpointID: 12, Cursor: "t/0@99", Bytes: 4096, Duration: activities.Duration(5 * time.Millisecond)}}}, nil
	})
	env.OnActivity(a.Restore, mock.Anything, activities.ShardRef{Pipeline: "p", Shard: "s", Epoch: 4}).
		Return(activities.RestoreSummary{CheckpointID: 12, Epoch: 3, Cursor: "t/0@99", Bytes: 4096}, nil)
	env.OnActivity(a.Resume, mock.Anything, activities.ShardRef{Pipeline: "p", Shard: "s", Epoch: 4}).Return(nil)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &newOwner, FinalRound: true})
	st := handoffResult(t, env)
	assert.Equal(t, workflows.StepDone, st.Step)
	require.NotNil(t, st.FinalCheckpoint)
	assert.Equal(t, activities.CheckpointSummary{CheckpointID: 12, Epoch: 3, Cursor: "t/0@99", Bytes: 4096, Duration: 5 * time.Millisecond}, *st.FinalCheckpoint)
	assert.True(t, asked.Final)
	assert.Equal(t, []activities.ShardEpoch{{Shard: "s", Epoch: 3}}, asked.Shards)
	assert.Equal(t, []string{
		"CheckpointRound@" + oldOwner.TaskQueue,
		"Restore@" + newOwner.TaskQueue,
		"Resume@" + newOwner.TaskQueue,
	}, *calls)
}

// TestHandoffFinalRoundNotOwner: a final round whose old owner answers
// "not owner" is recorded as skipped, and the move goes on.
func TestHandoffFinalRoundNotOwner(t *testing.T) {
	env, a, _ := newHandoffEnv(t)
	r := &activities.Rounds{}
	env.RegisterActivity(r)
	env.OnActivity(r.CheckpointRound, mock.Anything, mock.Anything).Return(activities.RoundResult{Shards: []activities.ShardResult{
		{Shard: "s", Epoch: 3, Status: activities.ShardNotOwner, Error: "worker \"w1\" does not serve shard p/s"}}}, nil)
	env.OnActivity(a.Restore, mock.Anything, mock.Anything).Return(activities.RestoreSummary{CheckpointID: 10, Epoch: 3}, nil)
	env.OnActivity(a.Resume, mock.Anything, mock.Anything).Return(nil)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, To: &newOwner, FinalRound: true})
	st := handoffResult(t, env)
	assert.Equal(t, workflows.StepDone, st.Step)
	assert.Nil(t, st.FinalCheckpoint)
	assert.Contains(t, st.FinalCheckpointSkipped, "not-owner")
}

// TestHandoffCancelledWhileWaitingForItsOwner: a handoff cancelled while
// it waits for the shard's new owner ends as cancelled. Before, it failed
// with "no new owner announced itself within 10m0s" seconds after it
// started, as if the owner wait had run out.
func TestHandoffCancelledWhileWaitingForItsOwner(t *testing.T) {
	env, _, _ := newHandoffEnv(t)
	env.RegisterDelayedCallback(env.CancelWorkflow, 5*time.Second)
	env.ExecuteWorkflow(workflows.HandoffWorkflow, workflows.HandoffInput{Pipeline: "p", Shard: "s", From: &oldOwner, FromDead: true})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	var ce *temporal.CanceledError
	assert.ErrorAs(t, err, &ce, "a cancelled handoff ends as cancelled: %v", err)
	assert.NotContains(t, err.Error(), "no new owner announced itself")
}
