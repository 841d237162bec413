package pipeline_test

import (
	"context"
	"slices"
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
// its description; with historyOnly, its history alone) while down, and
// cuts those in flight when it goes down, as an outage seen by those
// calls alone. The failure is FailedPrecondition, which the SDK does not
// retry, so a watch fails at once instead of after its minute of
// retries; the rest of the worker's calls go through.
type watchFault struct {
	id          string
	historyOnly bool

	mu       sync.Mutex
	down     bool
	inFlight map[*context.CancelFunc]watchCall
	failed   int
	passed   int
}

// watchCall is a call of the watch in flight.
type watchCall struct {
	history bool
	began   time.Time
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
	if id != f.id || (f.historyOnly && !history) {
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
	f.inFlight[key] = watchCall{history: history, began: time.Now()}
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

// polling reports whether a history call of the watch has been in
// flight for at least d.
func (f *watchFault) polling(d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.inFlight {
		if c.history && time.Since(c.began) >= d {
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

// leaseWaits records the waits of a worker before its probes of Temporal
// after a failed watch of its lease (pipeline.WithLeaseWaitObserver),
// each with how many watch calls had failed by then.
type leaseWaits struct {
	fault *watchFault

	mu     sync.Mutex
	waits  []time.Duration
	failed []int
}

func (l *leaseWaits) observe(d time.Duration) {
	failed, _ := l.fault.counts()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits = append(l.waits, d)
	l.failed = append(l.failed, failed)
}

// get returns the waits so far and the failed watch calls before each.
func (l *leaseWaits) get() ([]time.Duration, []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.waits), slices.Clone(l.failed)
}

// count returns how many waits there were so far.
func (l *leaseWaits) count() int { w, _ := l.get(); return len(w) }

// startWatchedWorker starts a Temporal dev server with a control worker
// and a pipeline worker "w1" whose calls watching its lease workflow go
// through fault, and returns once its lease heartbeats and a watch went
// through, with the worker's waits after failed watches.
func startWatchedWorker(t *testing.T, fault *watchFault) *leaseWaits {
	t.Helper()
	srv := temporaltest.Start(t)
	kc := newCluster(t, 1)
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(ctl)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)

	fault.id, fault.inFlight = workflows.LeaseWorkflowID("w1"), map[*context.CancelFunc]watchCall{}
	tc, err := client.Dial(client.Options{
		HostPort:          srv.HostPort,
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(fault.intercept)}},
	})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	t.Cleanup(func() { fault.set(false) }) // before the worker stops (cleanups run last first)
	waits := &leaseWaits{fault: fault}
	start(t, temporalPipeline(kc.ListenAddrs(), memory.New()), pipeline.WithWorkerID("w1"), pipeline.WithTemporal(tc),
		pipeline.WithLeaseWaitObserver(waits.observe))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	requireLeaseHeartbeat(t, ctx, srv.Client, fault.id)
	require.Eventually(t, func() bool { _, passed := fault.counts(); return passed > 0 }, 30*time.Second, 10*time.Millisecond, "the worker never watched its lease")
	return waits
}

// TestLeaseWatchBackoffStartsAfreshEachOutage: the worker's watch of its
// lease workflow backs off while Temporal does not answer it, and starts
// afresh once it does. Before, the backoff was reset only when the lease
// workflow ended: after an outage the workflow outlived, the next one
// began with the longest wait reached (here 16s; up to 30s). Each outage
// cuts a watch that lasted (longer than QuickWatchFailure), as an outage
// does: watches failing at once are TestLeaseWatchBacksOffWhileItFailsAtOnce's.
func TestLeaseWatchBackoffStartsAfreshEachOutage(t *testing.T) {
	fault := &watchFault{}
	waits := startWatchedWorker(t, fault)

	// First outage: four failed watches, 1s, 2s and 4s apart.
	require.Eventually(t, func() bool { return fault.polling(pipeline.QuickWatchFailure) }, 30*time.Second, 10*time.Millisecond)
	fault.set(true)
	require.Eventually(t, func() bool { failed, _ := fault.counts(); return failed >= 4 }, 30*time.Second, 10*time.Millisecond)
	fault.set(false)
	got, _ := waits.get()
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, got[:3], "the first outage's waits")
	// Back: the watch runs again, a history long poll in flight. The
	// second outage cuts it; the next watch follows after the first
	// wait, 1s, not the 8s or 16s the first outage reached.
	require.Eventually(t, func() bool { return fault.polling(pipeline.QuickWatchFailure) }, 60*time.Second, 10*time.Millisecond, "the worker did not watch its lease again")
	before := waits.count()
	failed, _ := fault.counts()
	fault.set(true)
	require.Eventually(t, func() bool { f, _ := fault.counts(); return f >= failed+2 }, 5*time.Second, 10*time.Millisecond,
		"the worker's watch waited longer than its first wait at the start of a new outage")
	got, _ = waits.get()
	require.Equal(t, time.Second, got[before], "the second outage's first wait")
}

// TestLeaseWatchBacksOffWhileItFailsAtOnce: a watch of the lease
// workflow that Temporal refuses at once (an error the SDK does not
// retry, here on the history alone) while the describe the worker probes
// Temporal with succeeds is tried again after ever longer waits: 1s, 2s,
// 4s, 8s. Before, every probe succeeded at once and the next watch began
// after 1s, a watch and a warning a second for as long as it lasted.
func TestLeaseWatchBacksOffWhileItFailsAtOnce(t *testing.T) {
	fault := &watchFault{historyOnly: true}
	waits := startWatchedWorker(t, fault)
	fault.set(true)
	// 1+2+4 = 7s of waits (before: 3s); 30s bounds a hang, not the waits.
	require.Eventually(t, func() bool { return waits.count() >= 4 }, 30*time.Second, 10*time.Millisecond)
	got, failed := waits.get()
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, got[:4], "the waits before the watches")
	for i := 1; i < 4; i++ {
		require.Greater(t, failed[i], failed[i-1], "wait %d followed no failed watch", i)
	}
}
