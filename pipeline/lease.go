package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/coordination/metered"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/workflows"
)

// leases is activities.Leases whose KeepLeases also ends when the
// Temporal worker stops (a graceful shutdown), so the activity completes
// and the lease workflow ends as stopped instead of timing out and
// handing the shards off as if the worker had died. Registered under the
// same activity name, KeepLeases.
type leases struct {
	activities.Leases
}

// KeepLeases runs activities.Leases.KeepLeases until the worker stops.
func (l *leases) KeepLeases(ctx context.Context, in activities.LeaseInput) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := activity.GetWorkerStopChannel(ctx)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return l.Leases.KeepLeases(ctx, in)
}

// startLease starts the worker's lease workflow, replacing one left by an
// earlier process of the same worker id.
func (w *Worker) startLease(ctx context.Context, tc client.Client) (client.WorkflowRun, error) {
	id := workflows.LeaseWorkflowID(w.o.workerID)
	opts := client.StartWorkflowOptions{
		ID: id, TaskQueue: workflows.ControlTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
	}
	// Coordinated: a dead worker's lease tells the pipeline's coordinator,
	// which starts the handoffs when the shards' next owners announce
	// themselves.
	in := workflows.LeaseInput{WorkerID: w.o.workerID, TaskQueue: w.TaskQueue(), HeartbeatTimeout: w.c.p.Checkpoint.HeartbeatTimeout,
		Coordinated: true, Pipelines: []string{w.c.p.Name}, Instance: w.instance}
	// A stop while the start is in flight leaves it a few seconds to
	// finish: a workflow the server created but this worker never heard
	// of could not be told of the stop (stopLease), and would declare the
	// worker dead.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	grace := context.AfterFunc(ctx, func() { time.AfterFunc(5*time.Second, cancel) })
	defer grace()
	run, err := tc.ExecuteWorkflow(sctx, opts, workflows.LeaseWorkflow, in)
	if err != nil {
		return nil, fmt.Errorf("worker %q: start lease workflow %s: %w", w.o.workerID, id, err)
	}
	return run, nil
}

// stopLease tells the lease workflow run that this worker stops
// gracefully (workflows.SignalStop). A run that already ended (its
// activity completed at the activity worker's stop) is no error.
func (w *Worker) stopLease(tc client.Client, run client.WorkflowRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := tc.SignalWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.SignalStop, workflows.StopRequest{Reason: "worker " + w.o.workerID + " stops"})
	var done *serviceerror.NotFound
	if err != nil && !errors.As(err, &done) {
		w.log.Warn("telling the lease workflow of the stop failed; it may declare this worker dead", "workflow_id", run.GetID(), "err", err)
	}
}

// leaseSupervisor holds the worker's current lease workflow run.
type leaseSupervisor struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	run client.WorkflowRun
}

func (l *leaseSupervisor) set(r client.WorkflowRun) {
	l.mu.Lock()
	l.run = r
	l.mu.Unlock()
}

func (l *leaseSupervisor) current() client.WorkflowRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.run
}

// quickWatchFailure: a watch of the lease workflow (Get) that failed
// sooner than this after it began was refused rather than cut by an
// outage (an error the SDK does not retry, such as permission denied on
// the history alone, while the describe awaitTemporal probes succeeds):
// the next probe waits twice as long as the last one began with, up to
// maxLeaseWatchWait, instead of watching again every second.
const quickWatchFailure = 5 * time.Second

// maxLeaseWatchWait is the longest wait before a probe of Temporal after
// a failed watch of the lease workflow.
const maxLeaseWatchWait = 30 * time.Second

// superviseLease starts a new lease workflow whenever the current one
// ends while the worker runs. That happens when Temporal was unreachable
// from this worker for longer than the heartbeat timeout: the workflow
// declared the worker dead and told the pipeline's coordinator, which left
// its shards out of the rounds; the worker announces them all again, and
// as their owner at the same epoch nothing moves. Without a new lease
// workflow, a later real death would go unnoticed. A wait that fails
// because Temporal is unreachable says nothing of the workflow: it is
// watched again once Temporal answers (awaitTemporal), and replaced only
// once Temporal says it ended. Watches that keep failing at once back off
// (quickWatchFailure); one that lasted (a real watch an outage cut)
// starts the backoff afresh.
func (w *Worker) superviseLease(ctx context.Context, tc client.Client, l *leaseSupervisor) {
	var first time.Duration // awaitTemporal's first wait after the last failed watch; 0 after a watch that lasted
	for {
		var st workflows.LeaseState
		began := time.Now()
		err := l.current().Get(ctx, &st)
		if ctx.Err() != nil {
			return
		}
		var ended *temporal.WorkflowExecutionError
		var gone *serviceerror.NotFound
		if err != nil && !errors.As(err, &ended) && !errors.As(err, &gone) {
			// Get gives up after a minute of failed calls: the workflow
			// may well be running (its heartbeat timeout is longer than
			// the outage), and a new one would terminate it.
			if first == 0 || time.Since(began) >= quickWatchFailure {
				first = time.Second
			} else {
				first = min(2*first, maxLeaseWatchWait)
			}
			w.log.Warn("could not watch the lease workflow (Temporal unreachable?); will watch it again once Temporal answers",
				"workflow_id", l.current().GetID(), "err", err, "in", first)
			if !w.awaitTemporal(ctx, tc, l.current(), first) {
				return
			}
			continue
		}
		first = 0
		w.log.Warn("the lease workflow ended while this worker runs (Temporal was unreachable for longer than the heartbeat timeout?); starting a new one",
			"status", st.Status, "told", st.Told, "err", err)
		w.m.leaseRestarts.Inc()
		if c, ok := w.host.control.(*workflowControl); ok {
			c.reannounce()
			c.wake()
		}
		for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
			run, err := w.startLease(ctx, tc)
			if err == nil {
				l.set(run)
				break
			}
			w.log.Warn("restarting the lease workflow failed; will retry", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// awaitTemporal returns once Temporal answers a describe of the lease
// workflow run, false when ctx ends first. Its probes back off from first
// to maxLeaseWatchWait over one outage; each outage starts afresh from 1s
// (a backoff kept across outages made the next one start with 30s
// waits), unless the watch keeps failing at once (superviseLease).
func (w *Worker) awaitTemporal(ctx context.Context, tc client.Client, run client.WorkflowRun, first time.Duration) bool {
	for wait := first; ; wait = min(2*wait, maxLeaseWatchWait) {
		if f := w.o.leaseWaits; f != nil {
			f(wait)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := tc.DescribeWorkflow(dctx, run.GetID(), run.GetRunID())
		cancel()
		var gone *serviceerror.NotFound
		if err == nil || errors.As(err, &gone) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.log.Debug("Temporal does not answer yet; the lease workflow is watched again once it does", "workflow_id", run.GetID(), "err", err, "in", min(2*wait, maxLeaseWatchWait))
	}
}

// errNoSplits: a pipeline worker serves its source's shards (Kafka
// partitions are owned through the group protocol), so a split offered
// to it was added to its job by mistake; refusing it releases it as a
// failed tenancy.
var errNoSplits = errors.New("pipeline workers serve their source's shards, not splits")

// membership is the worker's place in the coordination store: a
// split.Worker that renews its presence lease on its own goroutine.
type membership struct {
	sw     *split.Worker
	cancel context.CancelFunc
}

// join registers the worker in its coordination store (WithCoordination)
// and waits until its presence is written; nil without a store. A second
// live process with the same worker id makes it fail
// (split.ErrDuplicateWorker); the presence of a dead predecessor is taken
// over once it expires.
func (w *Worker) join(ctx context.Context) (*membership, error) {
	store := w.o.coord
	if store == nil {
		return nil, nil
	}
	id := w.o.workerID
	sm, stm := split.NewMetrics(nil), metered.NewMetrics(nil)
	if w.o.reg != nil {
		if err := register(w.partsReg(), sm.Owned, sm.Draining, sm.Quarantined, sm.Acquisitions, sm.Losses, sm.Revocations, sm.AssignTime, stm.Duration()); err != nil {
			return nil, fmt.Errorf("worker %q: coordination metrics: %w", id, err)
		}
	}
	sw, err := split.NewWorker(store, split.WorkerID(id),
		split.WithHandler(func(_ context.Context, t *split.Tenancy) error {
			return fmt.Errorf("worker %q refuses split %q: %w", id, t.Spec().ID, errNoSplits)
		}),
		split.WithMaxAttempts(1),
		split.WithMetrics(sm), split.WithStoreMetrics(stm),
		split.WithLogger(w.log.With("component", "coordination")))
	if err != nil {
		return nil, fmt.Errorf("worker %q: %w", id, err)
	}
	// The membership outlives Run's context: it is stopped after the
	// Temporal workers, so the presence lease is the last thing to go.
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = sw.Run(mctx) }()
	m := &membership{sw: sw, cancel: cancel}
	w.log.Info("registering in the coordination store", "lease_ttl", store.LeaseTTL())
	select {
	case <-sw.Registered():
		w.log.Info("registered in the coordination store", "instance", sw.Instance())
		return m, nil
	case <-sw.Stopped():
		m.stop()
		return nil, fmt.Errorf("worker %q: register in the coordination store: %w", id, sw.Err())
	case <-ctx.Done():
		m.stop()
		return nil, fmt.Errorf("worker %q: register in the coordination store: %w", id, ctx.Err())
	}
}

// stop withdraws the presence (split.Worker's graceful shutdown).
func (m *membership) stop() {
	if m == nil {
		return
	}
	m.cancel()
	<-m.sw.Stopped()
}
