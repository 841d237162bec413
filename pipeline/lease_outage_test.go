package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestLeaseWorkflowOutlivesAMinuteLongTemporalOutage: a worker cut off
// Temporal for longer than the minute the SDK retries a call for, but
// shorter than the lease workflow's heartbeat timeout, keeps its lease
// workflow. Before, the worker's wait for the workflow's end gave up with
// Unavailable, the worker read that as the workflow having ended and,
// back in touch, started a new one (terminating the healthy run, whose
// heartbeats carried the held shards).
func TestLeaseWorkflowOutlivesAMinuteLongTemporalOutage(t *testing.T) {
	srv := temporaltest.Start(t)
	kc := newCluster(t, 2)
	addrs := kc.ListenAddrs()

	// The workflows run on a control worker that stays connected: the
	// outage is the pipeline worker's alone.
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(ctl)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()

	tcut := &faults.Net{}
	reg := prometheus.NewRegistry()
	p := temporalPipeline(addrs, memory.New())
	// Heartbeats every 100s: an outage of 75s passes unnoticed by the
	// lease workflow.
	p.Checkpoint.HeartbeatTimeout = 5 * time.Minute
	w := start(t, p, pipeline.WithWorkerID("w1"), pipeline.WithTemporal(dialThrough(t, srv, tcut)), pipeline.WithMetrics(reg))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leaseID := workflows.LeaseWorkflowID("w1")
	requireLeaseHeartbeat(t, ctx, srv.Client, leaseID)
	desc, err := srv.Client.DescribeWorkflow(ctx, leaseID, "")
	require.NoError(t, err)
	firstRun := desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	tcut.Cut()
	// The outage's length is the scenario (past the SDK's one-minute
	// retry of a call), not a synchronisation.
	time.Sleep(75 * time.Second)
	tcut.Heal()

	require.NoError(t, w.w.Err())
	restarts := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "tflo_pipeline_lease_workflow_restarts_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no tflo_pipeline_lease_workflow_restarts_total metric")
		return 0
	}
	require.Zero(t, restarts(), "the worker took the outage for the end of its lease workflow")
	desc, err = srv.Client.DescribeWorkflow(ctx, leaseID, "")
	require.NoError(t, err)
	require.Equal(t, firstRun, desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "the lease workflow was replaced")
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.RawResponse.GetWorkflowExecutionInfo().GetStatus())
	require.Equal(t, workflows.LeaseAlive, queryLease(ctx, t, srv.Client, leaseID).Status)
}
