package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// watchFault fails the calls that watch one workflow (its history and
// its description) while down, and cuts those in flight when it goes
// down, as an outage seen by those calls alone. The failure is
// FailedPrecondition, which the SDK does not retry, so a watch fails at
// once instead of after its minute of retries; the rest of the worker's
// calls go through.
type watchFault struct {
	id string

	mu       sync.Mutex
	down     bool
	inFlight map[*context.CancelFunc]bool // true: a history call
	failed   int
	passed   int
}

func (f *watchFault) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var id string
	history := false
	switch r := req.(type) {
	case *workflowservice.GetWorkflowExecutionHistoryRequest:
		id, history = r.GetExecution().GetWorkflowId(), true
	case *workflowservice.DescribeWorkflowExecutionRequest:
		id = r.GetExecution().GetWorkflowId()
	}
	if id != f.id {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cut := status.Errorf(codes.FailedPrecondition, "watch of workflow %s cut by the test", id)
	f.mu.Lock()
	if f.down {
		f.failed++
		f.mu.Unlock()
		return cut
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key := &cancel
	f.inFlight[key] = history
	f.passed++
	f.mu.Unlock()
	err := invoker(ctx, method, req, reply, cc, opts...)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inFlight, key)
	if err != nil && f.down {
		f.failed++
		return cut
	}
	return err
}

func (f *watchFault) set(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	if down {
		for cancel := range f.inFlight {
			(*cancel)()
		}
	}
}

// polling reports whether a history call of the watch is in flight.
func (f *watchFault) polling() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, history := range f.inFlight {
		if history {
			return true
		}
	}
	return false
}

func (f *watchFault) counts() (failed, passed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed, f.passed
}

// TestLeaseWatchBackoffStartsAfreshEachOutage: the worker's watch of its
// lease workflow backs off while Temporal does not answer it, and starts
// afresh once it does. Before, the backoff was reset only when the lease
// workflow ended: after an outage the workflow outlived, the next one
// began with the longest wait reached (here 16s; up to 30s).
func TestLeaseWatchBackoffStartsAfreshEachOutage(t *testing.T) {
	srv := temporaltest.Start(t)
	kc := newCluster(t, 1)
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(ctl)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()

	fault := &watchFault{id: workflows.LeaseWorkflowID("w1"), inFlight: map[*context.CancelFunc]bool{}}
	tc, err := client.Dial(client.Options{
		HostPort:          srv.HostPort,
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(fault.intercept)}},
	})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	defer fault.set(false)
	start(t, temporalPipeline(kc.ListenAddrs(), memory.New()), pipeline.WithWorkerID("w1"), pipeline.WithTemporal(tc))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	requireLeaseHeartbeat(t, ctx, srv.Client, fault.id)
	require.Eventually(t, func() bool { _, passed := fault.counts(); return passed > 0 }, 30*time.Second, 10*time.Millisecond, "the worker never watched its lease")

	// First outage: four failed watches, 1s, 2s and 4s apart.
	fault.set(true)
	require.Eventually(t, func() bool { failed, _ := fault.counts(); return failed >= 4 }, 30*time.Second, 10*time.Millisecond)
	fault.set(false)
	// Back: the watch runs again, a history long poll in flight. The
	// second outage cuts it; the next watch follows within the first
	// wait.
	require.Eventually(t, fault.polling, 30*time.Second, 10*time.Millisecond, "the worker did not watch its lease again")
	failed, _ := fault.counts()
	fault.set(true)
	require.Eventually(t, func() bool { f, _ := fault.counts(); return f >= failed+2 }, 5*time.Second, 10*time.Millisecond,
		"the worker's watch waited longer than its first wait at the start of a new outage")
}
