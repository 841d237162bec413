package workflows_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

var owner1 = &workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 1}

func newCheckpointEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *activities.Checkpoints) {
	t.Helper()
	env := quietSuite().NewTestWorkflowEnvironment()
	a := activities.NewCheckpoints(activities.NewShards())
	env.RegisterActivity(a)
	env.RegisterWorkflow(workflows.CheckpointWorkflow)
	return env, a
}

// stopAfter sends SignalStop once the workflow has had d of virtual time.
func stopAfter(env *testsuite.TestWorkflowEnvironment, d time.Duration) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalStop, nil) }, d)
}

func stateOf(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.CheckpointState {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	logPanic(t, env.GetWorkflowError())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.CheckpointState
	require.NoError(t, env.GetWorkflowResult(&st))
	return st
}

// happyStages makes every stage succeed, numbering checkpoints 1, 2, ...
func happyStages(env *testsuite.TestWorkflowEnvironment, a *activities.Checkpoints) *atomic.Int64 {
	var ids atomic.Int64
	env.OnActivity(a.Snapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ref activities.ShardRef) (activities.SnapshotResult, error) {
			id := ids.Add(1)
			return activities.SnapshotResult{CheckpointID: uint64(id), Cursor: "readings/3@" + time.Duration(id).String(), Keys: 10}, nil
		})
	env.OnActivity(a.SaveState, mock.Anything, mock.Anything).Return(activities.SaveResult{Bytes: 1234, Requests: 2}, nil)
	env.OnActivity(a.CommitCursor, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.StageInput) (activities.CommitResult, error) {
			return activities.CommitResult{Cursor: "committed-" + time.Duration(in.CheckpointID).String()}, nil
		})
	return &ids
}

func TestCheckpointWorkflowRunsOnTimer(t *testing.T) {
	env, a := newCheckpointEnv(t)
	happyStages(env, a)
	stopAfter(env, 35*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "iot-portal", Shard: "readings/3", Interval: 10 * time.Second, Owner: owner1,
	})
	st := stateOf(t, env)
	assert.Equal(t, int64(3), st.Completed, "10s interval over 35s of virtual time")
	assert.Equal(t, uint64(3), st.LastID)
	assert.Equal(t, "committed-3ns", st.LastCursor)
	assert.Equal(t, int64(1234), st.LastBytes)
	assert.Equal(t, 2, st.LastRequests)
	assert.Equal(t, workflows.BreakerClosed, st.Breaker)
	assert.False(t, st.LastCompletedAt.IsZero())
}

func TestCheckpointWorkflowWaitsForOwnerAndFollowsIt(t *testing.T) {
	env, a := newCheckpointEnv(t)
	ids := happyStages(env, a)
	var queues []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		queues = append(queues, info.TaskQueue)
	})
	env.RegisterDelayedCallback(func() {
		assert.Equal(t, int64(0), ids.Load(), "no checkpoint may run before an owner is known")
		env.SignalWorkflow(workflows.SignalOwner, workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 4})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		// A late signal from an older epoch must not take the shard back.
		env.SignalWorkflow(workflows.SignalOwner, workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 3})
	}, time.Minute+2*time.Second)
	stopAfter(env, time.Minute+15*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{Pipeline: "p", Shard: "s", Interval: 10 * time.Second})
	st := stateOf(t, env)
	require.NotNil(t, st.Owner)
	assert.Equal(t, streaming.Epoch(4), st.Owner.Epoch)
	assert.Equal(t, "w2", st.Owner.WorkerID)
	assert.Equal(t, int64(2), st.Completed)
	require.NotEmpty(t, queues)
	for _, q := range queues {
		assert.Equal(t, workflows.WorkerTaskQueue("w2"), q, "stages run on the owner's own task queue")
	}
}

func TestCheckpointWorkflowCheckpointNowSignal(t *testing.T) {
	env, a := newCheckpointEnv(t)
	ids := happyStages(env, a)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalCheckpointNow, workflows.CheckpointNow{Reason: "test"})
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		assert.Equal(t, int64(1), ids.Load(), "checkpoint-now must not wait for the hour-long interval")
		env.SignalWorkflow(workflows.SignalStop, nil)
	}, 10*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "p", Shard: "s", Interval: time.Hour, Owner: owner1,
	})
	st := stateOf(t, env)
	assert.Equal(t, int64(1), st.Completed)
}

func TestCheckpointWorkflowStageRetriesThenSucceeds(t *testing.T) {
	env, a := newCheckpointEnv(t)
	env.OnActivity(a.Snapshot, mock.Anything, mock.Anything).Return(activities.SnapshotResult{CheckpointID: 7, Cursor: "c7"}, nil)
	var saves atomic.Int64
	env.OnActivity(a.SaveState, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.StageInput) (activities.SaveResult, error) {
			if saves.Add(1) < 3 {
				return activities.SaveResult{}, errors.New("store unavailable")
			}
			return activities.SaveResult{Bytes: 10, Requests: 1}, nil
		})
	env.OnActivity(a.CommitCursor, mock.Anything, mock.Anything).Return(activities.CommitResult{Cursor: "c7"}, nil)
	stopAfter(env, 15*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "p", Shard: "s", Interval: 10 * time.Second, Owner: owner1, StageAttempts: 3,
	})
	st := stateOf(t, env)
	assert.Equal(t, int64(3), saves.Load(), "the save stage is retried within its attempt budget")
	assert.Equal(t, int64(1), st.Completed)
	assert.Equal(t, int64(0), st.Failed)
	assert.Equal(t, uint64(7), st.LastID)
}

func TestCheckpointWorkflowStagePastDeadline(t *testing.T) {
	env, a := newCheckpointEnv(t)
	env.OnActivity(a.Snapshot, mock.Anything, mock.Anything).Return(activities.SnapshotResult{CheckpointID: 1}, nil)
	env.OnActivity(a.SaveState, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ activities.StageInput) (activities.SaveResult, error) {
			<-ctx.Done() // hangs until its start-to-close deadline
			return activities.SaveResult{}, ctx.Err()
		})
	commits := 0
	env.OnActivity(a.CommitCursor, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.StageInput) (activities.CommitResult, error) {
			commits++
			return activities.CommitResult{}, nil
		})
	stopAfter(env, 15*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "p", Shard: "s", Interval: 10 * time.Second, Owner: owner1,
		SaveTimeout: 200 * time.Millisecond, StageAttempts: 1,
	})
	st := stateOf(t, env)
	assert.Equal(t, int64(1), st.Failed)
	assert.Equal(t, int64(0), st.Completed)
	assert.Equal(t, 0, commits, "the cursor is never committed after a failed state save")
	assert.Contains(t, st.LastError, "save state of checkpoint 1")
}

func TestCheckpointWorkflowBreaker(t *testing.T) {
	env, a := newCheckpointEnv(t)
	var healthy atomic.Bool
	var snapshots atomic.Int64
	env.OnActivity(a.Snapshot, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ShardRef) (activities.SnapshotResult, error) {
			n := snapshots.Add(1)
			if !healthy.Load() {
				return activities.SnapshotResult{}, temporal.NewApplicationError("disk full", "StoreDown")
			}
			return activities.SnapshotResult{CheckpointID: uint64(n)}, nil
		})
	env.OnActivity(a.SaveState, mock.Anything, mock.Anything).Return(activities.SaveResult{}, nil)
	env.OnActivity(a.CommitCursor, mock.Anything, mock.Anything).Return(activities.CommitResult{}, nil)

	var states []workflows.CheckpointState
	query := func() {
		v, err := env.QueryWorkflow(workflows.QueryStatus)
		require.NoError(t, err)
		var st workflows.CheckpointState
		require.NoError(t, v.Get(&st))
		states = append(states, st)
	}
	// Interval 10s, threshold 2, cool-down 60s, one attempt per stage.
	env.RegisterDelayedCallback(query, 25*time.Second) // after failures at 10s, 20s: open
	env.RegisterDelayedCallback(func() {
		query() // 55s: still open, checkpoints at 30s..50s skipped
		attemptsWhileOpen := snapshots.Load()
		assert.Equal(t, int64(2), attemptsWhileOpen, "no stage may run while the breaker is open")
	}, 55*time.Second)
	// 80s is the probe (opened at 20s + 60s): it fails and reopens.
	env.RegisterDelayedCallback(query, 85*time.Second)
	env.RegisterDelayedCallback(func() { healthy.Store(true) }, 100*time.Second)
	// Next probe at 140s succeeds and closes.
	env.RegisterDelayedCallback(query, 145*time.Second)
	stopAfter(env, 150*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "p", Shard: "s", Interval: 10 * time.Second, Owner: owner1,
		BreakerThreshold: 2, BreakerCoolDown: time.Minute, StageAttempts: 1,
	})
	stateOf(t, env)
	require.Len(t, states, 4)
	assert.Equal(t, workflows.BreakerOpen, states[0].Breaker)
	assert.Equal(t, 2, states[0].ConsecutiveFailures)
	assert.Equal(t, workflows.BreakerOpen, states[1].Breaker)
	assert.Positive(t, states[1].Skipped)
	assert.Equal(t, workflows.BreakerOpen, states[2].Breaker, "a failed half-open probe reopens the breaker")
	assert.Equal(t, 3, states[2].ConsecutiveFailures)
	assert.Equal(t, workflows.BreakerClosed, states[3].Breaker, "a successful probe closes the breaker")
	assert.Equal(t, 0, states[3].ConsecutiveFailures)
	assert.Equal(t, int64(1), states[3].Completed)
}

func TestCheckpointWorkflowNotOwnerWaitsForNextOwner(t *testing.T) {
	env, a := newCheckpointEnv(t)
	var epochs []streaming.Epoch
	env.OnActivity(a.Snapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ref activities.ShardRef) (activities.SnapshotResult, error) {
			epochs = append(epochs, ref.Epoch)
			if ref.Epoch == 1 {
				return activities.SnapshotResult{}, temporal.NewNonRetryableApplicationError("moved", activities.ErrTypeNotOwner, nil)
			}
			return activities.SnapshotResult{CheckpointID: 1}, nil
		})
	env.OnActivity(a.SaveState, mock.Anything, mock.Anything).Return(activities.SaveResult{}, nil)
	env.OnActivity(a.CommitCursor, mock.Anything, mock.Anything).Return(activities.CommitResult{}, nil)
	// While it waits it still names the owner it lost, for the next
	// owner's handoff (which verifies that owner's final checkpoint).
	var waiting workflows.CheckpointState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&waiting))
	}, 30*time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalOwner, workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 2})
	}, time.Minute)
	stopAfter(env, 65*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "p", Shard: "s", Interval: 10 * time.Second, Owner: owner1, BreakerThreshold: 1,
	})
	st := stateOf(t, env)
	assert.Nil(t, waiting.Owner)
	if assert.NotNil(t, waiting.Previous) {
		assert.Equal(t, *owner1, *waiting.Previous)
	}
	assert.Equal(t, "w2", st.Owner.WorkerID)
	assert.Equal(t, []streaming.Epoch{1, 2}, epochs, "after NotOwner the workflow waits for the next owner instead of retrying")
	assert.Equal(t, workflows.BreakerClosed, st.Breaker, "a shard move is not a health failure")
	assert.Equal(t, int64(1), st.Completed)
}

func TestCheckpointWorkflowContinuesAsNewCarryingState(t *testing.T) {
	env, a := newCheckpointEnv(t)
	happyStages(env, a)
	env.RegisterDelayedCallback(func() {
		// Buffered before the continue-as-new point: must survive it.
		env.SignalWorkflow(workflows.SignalCheckpointNow, workflows.CheckpointNow{})
	}, 30*time.Second)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{
		Pipeline: "p", Shard: "s", Interval: 10 * time.Second, Owner: owner1, ContinueAsNewAfter: 3,
	})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	var next workflows.CheckpointInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	assert.Equal(t, int64(3), next.State.Completed)
	assert.Equal(t, uint64(3), next.State.LastID)
	require.NotNil(t, next.State.Owner, "the owner is carried in the state")
	assert.Equal(t, owner1.Epoch, next.State.Owner.Epoch)
}

func TestCheckpointWorkflowRejectsBadInput(t *testing.T) {
	env, _ := newCheckpointEnv(t)
	env.ExecuteWorkflow(workflows.CheckpointWorkflow, workflows.CheckpointInput{Shard: "s"})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pipeline is empty")
}
