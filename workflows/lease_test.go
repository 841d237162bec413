package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

func newLeaseEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *activities.Leases) {
	t.Helper()
	env := quietSuite().NewTestWorkflowEnvironment()
	a := &activities.Leases{}
	env.RegisterActivity(a)
	env.RegisterWorkflow(workflows.LeaseWorkflow)
	env.RegisterWorkflow(workflows.HandoffWorkflow)
	return env, a
}

// leaseResult is the state a lease workflow that ran to completion
// returned.
func leaseResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.LeaseState {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.LeaseState
	require.NoError(t, env.GetWorkflowResult(&st))
	return st
}

var leaseIn = workflows.LeaseInput{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1")}

func TestLeaseWorkerStopsCleanly(t *testing.T) {
	env, a := newLeaseEnv(t)
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(nil)
	env.ExecuteWorkflow(workflows.LeaseWorkflow, leaseIn)
	st := leaseResult(t, env)
	assert.Equal(t, workflows.LeaseStopped, st.Status)
	assert.Empty(t, st.Handoffs)
}

// TestLeaseStopSignalBeforeTheActivityStarts: a worker that stops
// before its lease activity started signals the stop; the workflow ends
// as stopped instead of waiting for the schedule-to-start timeout and
// declaring the worker dead.
func TestLeaseStopSignalBeforeTheActivityStarts(t *testing.T) {
	env, a := newLeaseEnv(t)
	in := leaseIn
	in.Coordinated = true
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).
		After(time.Minute). // past the 30s default schedule-to-start timeout
		Return(temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil))
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalStop, workflows.StopRequest{Reason: "worker w1 stops"})
	}, time.Second)
	env.ExecuteWorkflow(workflows.LeaseWorkflow, in)
	st := leaseResult(t, env)
	assert.Equal(t, workflows.LeaseStopped, st.Status)
	assert.Empty(t, st.Told, "a stopped worker's coordinators are not told of a death")
}

// TestLeaseStopSignalDuringTheRestartPause: the stop also ends the pause
// before a failed lease activity is restarted.
func TestLeaseStopSignalDuringTheRestartPause(t *testing.T) {
	env, a := newLeaseEnv(t)
	calls := 0
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(func(context.Context, activities.LeaseInput) error {
		calls++
		return errors.New("self-fenced: lease not renewed for a full TTL")
	})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalStop, workflows.StopRequest{Reason: "worker w1 stops"})
	}, time.Second) // inside the first pause (a third of the 30s default)
	env.ExecuteWorkflow(workflows.LeaseWorkflow, leaseIn)
	st := leaseResult(t, env)
	assert.Equal(t, workflows.LeaseStopped, st.Status)
	assert.Equal(t, 1, calls)
	assert.Equal(t, 1, st.Restarts)
}

func TestLeaseDeadWorkerHandsOffItsShards(t *testing.T) {
	env, a := newLeaseEnv(t)
	held := []activities.HeldShard{
		{Pipeline: "iot", Shard: "readings-0", Epoch: 3, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"},
		{Pipeline: "iot", Shard: "readings-2", Epoch: 5, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"},
	}
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(temporal.NewHeartbeatTimeoutError(held))
	var started []workflows.HandoffInput
	var ids []string
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var in workflows.HandoffInput
		require.NoError(t, args.Get(&in))
		started = append(started, in)
		ids = append(ids, info.WorkflowExecution.ID)
	})
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	env.ExecuteWorkflow(workflows.LeaseWorkflow, leaseIn)
	st := leaseResult(t, env)
	assert.Equal(t, workflows.LeaseDead, st.Status)
	assert.Equal(t, held, st.Orphaned)
	assert.Equal(t, []string{workflows.HandoffWorkflowID("iot", "readings-0"), workflows.HandoffWorkflowID("iot", "readings-2")}, st.Handoffs)
	require.Len(t, started, 2)
	// The test environment reports the children's starts in no set order.
	assert.ElementsMatch(t, st.Handoffs, ids)
	epochs := map[streaming.ShardID]streaming.Epoch{}
	for _, in := range started {
		assert.True(t, in.FromDead, "the dead owner's final checkpoint is skipped")
		require.NotNil(t, in.From)
		epochs[in.Shard] = in.From.Epoch
		assert.Nil(t, in.To, "the new owner is decided on the data plane and announces itself")
	}
	assert.Equal(t, map[streaming.ShardID]streaming.Epoch{"readings-0": 3, "readings-2": 5}, epochs)
}

func TestLeaseKeeperFailureRestartsActivity(t *testing.T) {
	env, a := newLeaseEnv(t)
	calls := 0
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(func(context.Context, activities.LeaseInput) error {
		calls++
		if calls < 3 {
			return errors.New("self-fenced: lease not renewed for a full TTL")
		}
		return nil
	})
	env.ExecuteWorkflow(workflows.LeaseWorkflow, leaseIn)
	st := leaseResult(t, env)
	assert.Equal(t, 3, calls)
	assert.Equal(t, 2, st.Restarts)
	assert.Equal(t, workflows.LeaseStopped, st.Status)
}

// TestLeaseDeadBeforeTheRestartedActivityHandsOffWhatItHeld: a worker
// whose leases were lost, and which died before its restarted lease
// activity started, ends the activity in a schedule-to-start timeout,
// which carries no heartbeat. Bug: the workflow then knew of no shard
// and handed off none. Now the lost-leases error carries the held
// shards, and the workflow hands those off.
func TestLeaseDeadBeforeTheRestartedActivityHandsOffWhatItHeld(t *testing.T) {
	env, a := newLeaseEnv(t)
	held := []activities.HeldShard{{Pipeline: "iot", Shard: "readings-1", Epoch: 7, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"}}
	calls := 0
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(func(context.Context, activities.LeaseInput) error {
		calls++
		if calls == 1 {
			return temporal.NewApplicationError("worker \"w1\": leases lost: leases expired", activities.ErrTypeLeasesLost, held)
		}
		return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
	})
	var started []workflows.HandoffInput
	env.SetOnChildWorkflowStartedListener(func(_ *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var in workflows.HandoffInput
		require.NoError(t, args.Get(&in))
		started = append(started, in)
	})
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	env.ExecuteWorkflow(workflows.LeaseWorkflow, leaseIn)
	st := leaseResult(t, env)
	assert.Equal(t, 2, calls)
	assert.Equal(t, workflows.LeaseDead, st.Status)
	assert.Equal(t, held, st.Orphaned)
	assert.Equal(t, []string{workflows.HandoffWorkflowID("iot", "readings-1")}, st.Handoffs)
	require.Len(t, started, 1)
	require.NotNil(t, started[0].From)
	assert.Equal(t, streaming.Epoch(7), started[0].From.Epoch)
}

// TestLeaseDeadWorkerTellsItsCoordinators: with coordinators, a dead
// worker's lease tells each pipeline's coordinator, which starts the
// handoffs when the next owners announce themselves; it starts none.
func TestLeaseDeadWorkerTellsItsCoordinators(t *testing.T) {
	env, a := newLeaseEnv(t)
	held := []activities.HeldShard{
		{Pipeline: "iot", Shard: "readings-0", Epoch: 3, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"},
		{Pipeline: "fx", Shard: "eurusd", Epoch: 2, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"},
		{Pipeline: "iot", Shard: "readings-2", Epoch: 5, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"},
	}
	env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(temporal.NewHeartbeatTimeoutError(held))
	told := map[string]workflows.WorkerGone{}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", workflows.SignalWorkerGone, mock.Anything).Return(
		func(_, id, _, _ string, arg any) error {
			told[id] = arg.(workflows.WorkerGone)
			return nil
		})
	env.SetOnChildWorkflowStartedListener(func(*workflow.Info, workflow.Context, converter.EncodedValues) {
		t.Error("a coordinated lease starts no handoff")
	})
	in := leaseIn
	in.Coordinated = true
	in.Instance = "run-1"
	env.ExecuteWorkflow(workflows.LeaseWorkflow, in)
	st := leaseResult(t, env)
	assert.Equal(t, workflows.LeaseDead, st.Status)
	assert.Equal(t, []string{workflows.CoordinatorWorkflowID("iot"), workflows.CoordinatorWorkflowID("fx")}, st.Told)
	assert.Empty(t, st.Handoffs)
	iot := told[workflows.CoordinatorWorkflowID("iot")]
	assert.Equal(t, "w1", iot.WorkerID)
	assert.Equal(t, []activities.ShardEpoch{{Shard: "readings-0", Epoch: 3}, {Shard: "readings-2", Epoch: 5}}, iot.Shards)
	assert.Contains(t, iot.Reason, "heartbeat timed out")
	assert.Equal(t, "run-1", iot.Instance, "the notice names the worker's run")
	assert.Equal(t, "run-1", told[workflows.CoordinatorWorkflowID("fx")].Instance)
}

// TestLeaseDeadWorkerWithoutShardsTellsItsPipelines: a worker that died
// before its lease activity heartbeat (a schedule-to-start timeout: no
// details) held no shard the lease knows of; its pipelines' coordinators
// are still told, with no shards, or their rounds would wait on it until
// they time out. A pipeline of the heartbeat is told once.
func TestLeaseDeadWorkerWithoutShardsTellsItsPipelines(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		wantTold []string
	}{
		{"no heartbeat", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil),
			[]string{workflows.CoordinatorWorkflowID("iot"), workflows.CoordinatorWorkflowID("fx")}},
		{"heartbeat of one pipeline", temporal.NewHeartbeatTimeoutError([]activities.HeldShard{
			{Pipeline: "fx", Shard: "eurusd", Epoch: 2, TaskQueue: leaseIn.TaskQueue, WorkerID: "w1"},
		}), []string{workflows.CoordinatorWorkflowID("fx"), workflows.CoordinatorWorkflowID("iot")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, a := newLeaseEnv(t)
			env.OnActivity(a.KeepLeases, mock.Anything, mock.Anything).Return(tc.err)
			var told []string
			gone := map[string]workflows.WorkerGone{}
			env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", workflows.SignalWorkerGone, mock.Anything).Return(
				func(_, id, _, _ string, arg any) error {
					told = append(told, id)
					gone[id] = arg.(workflows.WorkerGone)
					return nil
				})
			in := leaseIn
			in.Coordinated = true
			in.Pipelines = []string{"iot", "fx", "iot"}
			env.ExecuteWorkflow(workflows.LeaseWorkflow, in)
			st := leaseResult(t, env)
			assert.Equal(t, workflows.LeaseDead, st.Status)
			assert.Equal(t, tc.wantTold, told)
			assert.Equal(t, tc.wantTold, st.Told)
			assert.Equal(t, "w1", gone[workflows.CoordinatorWorkflowID("iot")].WorkerID)
			assert.Empty(t, gone[workflows.CoordinatorWorkflowID("iot")].Shards)
		})
	}
}
