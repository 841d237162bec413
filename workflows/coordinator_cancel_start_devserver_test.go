package workflows_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestCancelledCoordinatorStartsTheHandoffItAnnounced: a cancellation
// request and an announcement that moves a shard reach the coordinator in
// one workflow task. The announcement's answer names the handoff it
// started, so the handoff must run. Before, the cancelled run ended in
// that same task, before the server had started the child: a parent that
// closed first never starts its abandoned child, so the handoff the
// worker was told of never ran and the shard was never restored on its
// new owner.
func TestCancelledCoordinatorStartsTheHandoffItAnnounced(t *testing.T) {
	srv := temporaltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The announcement may miss the cancelled run's task (it is then
	// served by a new run, which moves nothing): the scenario is played
	// until it does not.
	served := 0
	for i := 0; i < 5 && served == 0; i++ {
		in := coordIn
		in.Pipeline = fmt.Sprintf("iot%d", i)
		in.Manual = true
		if cancelWhileAnnouncing(t, ctx, srv.Client, in) {
			served++
		}
	}
	require.NotZero(t, served, "no announcement reached a cancelled coordinator's last task")
}

// cancelWhileAnnouncing plays the scenario on in.Pipeline and reports
// whether the cancelled run answered the announcement.
func cancelWhileAnnouncing(t *testing.T, ctx context.Context, c client.Client, in workflows.CoordinatorInput) bool {
	t.Helper()
	id := workflows.CoordinatorWorkflowID(in.Pipeline)
	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	workflows.Register(ctl)
	require.NoError(t, ctl.Start())
	first, err := workflows.Announce(ctx, c, in, announcement("w1", 1, "readings/0"))
	require.NoError(t, err)
	ctl.Stop()

	// With no control worker, the announcement waits on the server (a
	// workflow task for it is pending), then the cancellation joins it.
	type answer struct {
		res workflows.AnnounceResult
		err error
	}
	moved := make(chan answer, 1)
	go func() {
		res, err := workflows.Announce(ctx, c, in, announcement("w2", 2, "readings/0"))
		moved <- answer{res, err}
	}()
	require.Eventually(t, func() bool {
		d, err := c.DescribeWorkflow(ctx, id, "")
		return err == nil && d.RawResponse.GetPendingWorkflowTask() != nil
	}, 30*time.Second, 10*time.Millisecond, "the announcement never reached the coordinator")
	require.NoError(t, c.CancelWorkflow(ctx, id, ""))

	ctl = worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	workflows.Register(ctl)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()
	var a answer
	select {
	case a = <-moved:
	case <-ctx.Done():
		t.Fatal("the announcement never got an answer")
	}
	require.NoError(t, a.err)
	var ce *temporal.CanceledError
	require.ErrorAs(t, c.GetWorkflow(ctx, id, first.Coordinator).Get(ctx, nil), &ce, "the coordinator did not end as cancelled")
	if a.res.Coordinator != first.Coordinator {
		return false
	}
	require.Len(t, a.res.Previous, 1)
	handoff := a.res.Previous[0].Handoff
	require.Equal(t, workflows.HandoffWorkflowIDAt(in.Pipeline, "readings/0", 2), handoff)
	require.Eventually(t, func() bool {
		_, err := c.DescribeWorkflow(ctx, handoff, "")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the handoff %s the coordinator answered with never started", handoff)
	return true
}
