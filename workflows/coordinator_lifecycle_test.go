package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// TestManualCoordinatorContinuesAsNew: a coordinator with Manual set
// (pipeline.control: checkpoint policy disabled; starter --manual) runs no
// rounds on its own, but still serves every announcement and starts a
// handoff child per moved shard: its history grows with shard moves. It
// continues as new while idle too; before, the check ran only after a
// round, so such a run grew until the server terminated it.
func TestManualCoordinatorContinuesAsNew(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	// Shards move back and forth between w1 and w2 (rebalances): each
	// move is an update and a handoff child in the coordinator's history.
	for i := range 40 {
		w := "w1"
		if i%2 == 1 {
			w = "w2"
		}
		announceAt(env, time.Duration(i)*time.Minute, announcement(w, streaming.Epoch(i+1), "readings/0", "readings/1"))
	}
	env.RegisterDelayedCallback(func() {
		env.SetCurrentHistoryLength(60_000)
		env.SetContinueAsNewSuggested(true)
	}, 20*time.Minute+30*time.Second)
	stopCoordinatorAfter(env, 2*time.Hour)
	in := coordIn
	in.Manual = true
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can,
		"a manual coordinator whose history passed 10,000 events (and the server suggests continue-as-new) must continue as new; it ran on until stopped")
}

// TestCoordinatorCancelEndsTheRun: a cancellation request (temporal
// workflow cancel, the web UI's "Request Cancellation") makes every Await
// and timer of the coordinator return at once with ErrCanceled: the run
// ends as cancelled. Before, its loop ignored the error and spun without
// yielding (the SDK's deadlock detector failed the workflow task, which
// was retried for ever).
func TestCoordinatorCancelEndsTheRun(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	env.RegisterDelayedCallback(env.CancelWorkflow, 15*time.Second)
	env.SetTestTimeout(20 * time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	}()
	select {
	case <-done:
	case <-time.After(25 * time.Second):
		t.Fatal("the cancelled coordinator never ended")
	}
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	logPanic(t, err)
	require.Error(t, err)
	var ce *temporal.CanceledError
	require.ErrorAs(t, err, &ce, "a cancelled coordinator ends as cancelled: %v", err)
}
