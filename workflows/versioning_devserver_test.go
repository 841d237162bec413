package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

func startControl(t *testing.T, c client.Client, buildID string) worker.Worker {
	t.Helper()
	w := worker.New(c, workflows.ControlTaskQueue, worker.Options{DeploymentOptions: workflows.ControlDeployment("tflo-test", buildID)})
	workflows.Register(w)
	require.NoError(t, w.Start())
	return w
}

func setCurrent(t *testing.T, ctx context.Context, c client.Client, buildID string) {
	t.Helper()
	h := c.WorkerDeploymentClient().GetHandle("tflo-test")
	require.Eventually(t, func() bool {
		_, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "set the current version to %s", buildID)
}

// continuedAsNew returns the continue-as-new event of a run, or nil.
func continuedAsNew(t *testing.T, ctx context.Context, c client.Client, id, runID string) *historypb.WorkflowExecutionContinuedAsNewEventAttributes {
	t.Helper()
	for _, ev := range temporaltest.History(t, ctx, c, id, runID) {
		if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
			return a
		}
	}
	return nil
}

func versionOf(t *testing.T, ctx context.Context, c client.Client, id, runID string) (string, enumspb.VersioningBehavior) {
	t.Helper()
	d, err := c.DescribeWorkflow(ctx, id, runID)
	require.NoError(t, err)
	vi := d.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	return vi.GetDeploymentVersion().GetBuildId(), vi.GetBehavior()
}

// TestWorkerVersioningOnDevServer: the coordinator runs pinned on the
// control worker's version while its rounds run on an unversioned worker
// queue; when a new version becomes current, the running coordinator stays
// on its version until it continues as new, and the next run is on the
// new one.
func TestWorkerVersioningOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	v1 := startControl(t, c, "v1")
	defer v1.Stop()
	setCurrent(t, ctx, c, "v1")
	ms, err := fakeactivities.NewMemoryShards("iot", 2, 4, 8, memory.New(), "w1")
	require.NoError(t, err)
	startMemoryWorkers(t, c, ms, "w1") // unversioned

	id := workflows.CoordinatorWorkflowID("iot")
	in := workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(200 * time.Millisecond), ContinueAsNewAfter: 15}
	announceAll(t, ctx, c, in, ms)
	waitFor(t, func() bool { return coordinatorStatus(t, c, "iot").Complete >= 2 })
	first, err := c.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	firstRun := first.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	build, behavior := versionOf(t, ctx, c, id, firstRun)
	assert.Equal(t, "v1", build)
	assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, behavior)

	v2 := startControl(t, c, "v2")
	defer v2.Stop()
	setCurrent(t, ctx, c, "v2")
	build, _ = versionOf(t, ctx, c, id, firstRun)
	assert.Equal(t, "v1", build, "a pinned run stays on its version")

	// v1 keeps serving its pinned run until it continues as new (at once:
	// the target version changed), with AutoUpgrade as the next run's
	// initial behaviour. Servers from 1.30 start that run on v2; the
	// pinned dev server (1.29) ignores the option and keeps it on v1.
	var next string
	waitFor(t, func() bool {
		d, err := c.DescribeWorkflow(ctx, id, "")
		require.NoError(t, err)
		next = d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return next != firstRun
	})
	build, behavior = versionOf(t, ctx, c, id, next)
	assert.Contains(t, []string{"v1", "v2"}, build)
	assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, behavior)
	t.Logf("after continue-as-new the coordinator runs on %s (%s); the option it sent is checked in TestCoordinatorContinuesAsNewWithItsState", build, behavior)
	require.NotNil(t, continuedAsNew(t, ctx, c, id, firstRun), "the first run continued as new")
	st := coordinatorStatus(t, c, "iot")
	assert.GreaterOrEqual(t, st.Generation, 1)
	waitFor(t, func() bool { return coordinatorStatus(t, c, "iot").Round > st.Round+2 }) // rounds go on after the upgrade
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalStop, nil))
}
