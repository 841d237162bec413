package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
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

// earlierBuildInput is a coordinator's continue-as-new input as builds
// before the folded table wrote it: the whole table in "shards".
const earlierBuildInput = `{"pipeline":"iot","interval":"10s","state":{"pipeline":"iot","round":7,"complete":6,"partial":1,"failed":0,"breaker":"closed","search_breaker":"closed",` +
	`"workers":[{"worker_id":"w1","task_queue":"tflo-worker-w1","status":"live","shards":1,"last_round":7,"instance":"w1-1"},{"worker_id":"w2","task_queue":"tflo-worker-w2","status":"live","shards":1,"last_round":7,"instance":"w2-1"}],` +
	`"shards":[{"shard":"readings/0","owner":{"worker_id":"w1","task_queue":"tflo-worker-w1","epoch":3},"status":"ok","round":7,"checkpoint_id":7,"cursor":"readings/0@41","bytes":1000,"duration":"3ms","at":"2026-12-07T21:00:00Z","local":2},` +
	`{"shard":"readings/1","owner":{"worker_id":"w2","task_queue":"tflo-worker-w2","epoch":4},"status":"failed","round":6,"checkpoint_id":6,"cursor":"readings/1@40","at":"2026-12-07T20:59:50Z","error":"commit: timeout","handoff":"w1@3 → w2@4: done in 1s, final checkpoint 5"}],` +
	`"generation":2}}`

// TestCoordinatorTakesTheWholeTableOfAnEarlierBuild: a run of an earlier
// build continuing as new into this one hands over its whole table; the
// new run has every row as it was and its round asks each owner for its
// shards at their epochs.
func TestCoordinatorTakesTheWholeTableOfAnEarlierBuild(t *testing.T) {
	var in workflows.CoordinatorInput
	payload := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}, Data: []byte(earlierBuildInput)}
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(payload, &in))
	env, f := newCoordinatorEnv(t)
	var table []workflows.ShardRow
	env.RegisterDelayedCallback(func() { queryInto(t, env, workflows.QueryShards, &table) }, 5*time.Second)
	stopCoordinatorAfter(env, 15*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	st := coordinatorResult(t, env)
	assert.Equal(t, 3, st.Generation)
	assert.Equal(t, uint64(8), st.Round)

	at := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	assert.Equal(t, []workflows.ShardRow{
		{Shard: "readings/0", Owner: workflows.Owner{WorkerID: "w1", TaskQueue: "tflo-worker-w1", Epoch: 3}, Status: workflows.ShardOK, Round: 7, CheckpointID: 7,
			Cursor: "readings/0@41", Bytes: 1000, Duration: activities.Duration(3 * time.Millisecond), At: at, Local: 2},
		{Shard: "readings/1", Owner: workflows.Owner{WorkerID: "w2", TaskQueue: "tflo-worker-w2", Epoch: 4}, Status: workflows.ShardFailed, Round: 6, CheckpointID: 6,
			Cursor: "readings/1@40", At: at.Add(-10 * time.Second), Error: "commit: timeout", Handoff: "w1@3 → w2@4: done in 1s, final checkpoint 5"},
	}, table, "the table before the new run's first round")

	asked := map[string][]activities.ShardEpoch{}
	for _, c := range f.roundCalls() {
		assert.Equal(t, uint64(8), c.in.Round)
		asked[c.in.WorkerID] = c.in.Shards
	}
	assert.Equal(t, map[string][]activities.ShardEpoch{"w1": {{Shard: "readings/0", Epoch: 3}}, "w2": {{Shard: "readings/1", Epoch: 4}}}, asked)
	// Round 8 checkpointed both; the local count and the handoff stay.
	assert.Equal(t, int64(2), rowOf(t, st, "readings/0").Local)
	assert.Equal(t, workflows.ShardOK, rowOf(t, st, "readings/1").Status)
	assert.Equal(t, uint64(8), rowOf(t, st, "readings/1").Round)
	assert.Equal(t, "w1@3 → w2@4: done in 1s, final checkpoint 5", rowOf(t, st, "readings/1").Handoff)
}
