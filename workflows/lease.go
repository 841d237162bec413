package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
)

// LeaseInput supervises one worker.
type LeaseInput struct {
	WorkerID  string `json:"worker_id"`
	TaskQueue string `json:"task_queue"`
	// HeartbeatTimeout: a worker silent for this long is dead (default 30s).
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// Restarts of the lease activity (after lost leases) before the
	// workflow continues as new (default 100).
	MaxRestarts int `json:"max_restarts,omitempty"`
	// Restarts carried across continue-as-new.
	Restarts int `json:"restarts,omitempty"`
	// Held: the shards the worker held when its lease activity last
	// ended with its leases lost (ErrTypeLeasesLost), carried across
	// continue-as-new: a worker that dies before the restarted activity
	// heartbeats (a schedule-to-start timeout has no heartbeat) is known
	// to hold them.
	Held []activities.HeldShard `json:"held,omitempty"`
	// Coordinated: the worker's pipelines run checkpoint coordinators,
	// which start handoffs when the shards' next owners announce
	// themselves. A dead worker's lease then tells each coordinator
	// (SignalWorkerGone) instead of starting handoffs itself.
	Coordinated bool `json:"coordinated,omitempty"`
	// Pipelines the worker serves (Coordinated): a dead worker's lease
	// tells each one's coordinator, also when the worker died holding no
	// shard it had reported (it died before its first heartbeat, or
	// gained its shards after the last one); the coordinator would
	// otherwise wait on it in every round until the round times out.
	Pipelines []string `json:"pipelines,omitempty"`
	// Instance names the worker's run (Announcement.Instance), told to
	// the coordinators with the death so that they ignore it once a later
	// run of the same worker id has announced itself.
	Instance string `json:"instance,omitempty"`
}

// LeaseState is the lease workflow's status and result.
type LeaseState struct {
	WorkerID string `json:"worker_id"`
	Status   string `json:"status"` // alive, stopped, dead
	Restarts int    `json:"restarts"`
	// Handoffs are the workflow ids of the handoffs started for a dead
	// worker's shards.
	Handoffs []string `json:"handoffs,omitempty"`
	// Orphaned are the shards the dead worker held.
	Orphaned []activities.HeldShard `json:"orphaned,omitempty"`
	// Told are the coordinators told of the death (Coordinated).
	Told    []string `json:"told,omitempty"`
	LastErr string   `json:"last_error,omitempty"`
}

// Lease workflow statuses.
const (
	LeaseAlive   = "alive"
	LeaseStopped = "stopped"
	LeaseDead    = "dead"
)

// LeaseWorkflow watches one worker through a long-running activity on the
// worker's own queue that heartbeats the shards it holds (renewal itself
// runs in the worker, so it goes on while Temporal is unreachable). When
// the worker dies, the heartbeat times out and, with Coordinated, the
// workflow tells the coordinator of each pipeline of the last heartbeat's
// shards (SignalWorkerGone), which starts the handoffs when the shards'
// next owners announce themselves; without, it starts a HandoffWorkflow
// for each shard, marked FromDead so the final checkpoint is skipped,
// that waits for the shard's new owner (SignalOwner).
func LeaseWorkflow(ctx workflow.Context, in LeaseInput) (LeaseState, error) {
	if in.WorkerID == "" || in.TaskQueue == "" {
		return LeaseState{}, temporal.NewNonRetryableApplicationError("lease workflow: worker id and task queue are required", activities.ErrTypeBadInput, nil)
	}
	if in.HeartbeatTimeout <= 0 {
		in.HeartbeatTimeout = 30 * time.Second
	}
	if in.MaxRestarts <= 0 {
		in.MaxRestarts = 100
	}
	st := LeaseState{WorkerID: in.WorkerID, Status: LeaseAlive, Restarts: in.Restarts}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (LeaseState, error) { return st, nil }); err != nil {
		return st, err
	}
	// SignalStop: the worker is stopping gracefully. Its activity worker
	// stopped first, so the lease activity normally completes on its own;
	// the signal covers a stop that came before the activity started (it
	// would otherwise end in a schedule-to-start timeout, read as death).
	stop := workflow.GetSignalChannel(ctx, SignalStop)
	stopped := func(req StopRequest) (LeaseState, error) {
		workflow.GetLogger(ctx).Info("lease stopped by its worker", "reason", req.Reason)
		st.Status = LeaseStopped
		return st, nil
	}
	var stopReq *StopRequest
	onStop := func(sel workflow.Selector) {
		sel.AddReceive(stop, func(c workflow.ReceiveChannel, _ bool) {
			stopReq = &StopRequest{}
			c.Receive(ctx, stopReq)
		})
	}
	var a *activities.Leases
	for {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:              in.TaskQueue,
			ScheduleToStartTimeout: in.HeartbeatTimeout,
			StartToCloseTimeout:    365 * 24 * time.Hour,
			HeartbeatTimeout:       in.HeartbeatTimeout,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		})
		keep := workflow.ExecuteActivity(actx, a.KeepLeases, activities.LeaseInput{
			WorkerID: in.WorkerID, Interval: in.HeartbeatTimeout / 3,
		})
		var err error
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(keep, func(f workflow.Future) { err = f.Get(ctx, nil) })
		onStop(sel)
		sel.Select(ctx)
		if stopReq != nil {
			return stopped(*stopReq)
		}
		if err == nil {
			st.Status = LeaseStopped
			return st, nil
		}
		st.LastErr = err.Error()
		var te *temporal.TimeoutError
		if errors.As(err, &te) && (te.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT || te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START) {
			var held []activities.HeldShard
			if te.HasLastHeartbeatDetails() {
				if derr := te.LastHeartbeatDetails(&held); derr != nil {
					workflow.GetLogger(ctx).Warn("unreadable heartbeat details", "error", derr)
				}
			} else if len(in.Held) > 0 && workflow.GetVersion(ctx, "lease-held-across-restarts", workflow.DefaultVersion, 1) >= 1 {
				// Dead before the restarted activity heartbeat: the
				// shards it held when its leases were lost.
				held = in.Held
			}
			st.Status = LeaseDead
			st.Orphaned = held
			if in.Coordinated {
				return st, tellCoordinators(ctx, &st, held, in.Pipelines, in.Instance)
			}
			return st, startHandoffs(ctx, &st, held)
		}
		// The worker is alive but its keeper failed: restart the activity
		// after a pause, and keep history bounded.
		var lost *temporal.ApplicationError
		if errors.As(err, &lost) && lost.Type() == activities.ErrTypeLeasesLost && lost.HasDetails() {
			var held []activities.HeldShard
			if derr := lost.Details(&held); derr != nil {
				workflow.GetLogger(ctx).Warn("unreadable held shards of a lost lease", "error", derr)
			} else {
				in.Held = held
			}
		}
		st.Restarts++
		pause := workflow.NewTimer(ctx, in.HeartbeatTimeout/3)
		sel = workflow.NewSelector(ctx)
		sel.AddFuture(pause, func(f workflow.Future) { err = f.Get(ctx, nil) })
		onStop(sel)
		sel.Select(ctx)
		if stopReq != nil {
			return stopped(*stopReq)
		}
		if err != nil {
			return st, err
		}
		if st.Restarts-in.Restarts >= in.MaxRestarts || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// A stop that came in the pause's workflow task lost the
			// selector to the timer: honour it rather than drop it with
			// this run (histories before the version continued as new).
			if workflow.GetVersion(ctx, "lease-stop-before-continue-as-new", workflow.DefaultVersion, 1) >= 1 {
				var req StopRequest
				if stop.ReceiveAsync(&req) {
					return stopped(req)
				}
			}
			next := in
			next.Restarts = st.Restarts
			return st, workflow.NewContinueAsNewErrorWithOptions(ctx, workflow.ContinueAsNewErrorOptions{
				InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade,
			}, LeaseWorkflow, next)
		}
	}
}

// tellCoordinators tells the coordinator of each pipeline the dead worker
// served that it is gone, with the shards of its last heartbeat: the
// pipelines of those shards, then the worker's other pipelines (served),
// told with no shards. Each notice names the worker's run (instance).
func tellCoordinators(ctx workflow.Context, st *LeaseState, held []activities.HeldShard, served []string, instance string) error {
	byPipeline := map[string][]activities.ShardEpoch{}
	var pipelines []string
	for _, h := range held {
		if _, ok := byPipeline[h.Pipeline]; !ok {
			pipelines = append(pipelines, h.Pipeline)
		}
		byPipeline[h.Pipeline] = append(byPipeline[h.Pipeline], activities.ShardEpoch{Shard: h.Shard, Epoch: h.Epoch})
	}
	var idle []string
	for _, p := range served {
		if _, ok := byPipeline[p]; !ok && p != "" && !slices.Contains(idle, p) {
			idle = append(idle, p)
		}
	}
	// Histories before the version told only the heartbeat's pipelines.
	if len(idle) > 0 && workflow.GetVersion(ctx, "lease-tell-idle-pipelines", workflow.DefaultVersion, 1) >= 1 {
		pipelines = append(pipelines, idle...)
	}
	var errs []error
	for _, p := range pipelines {
		id := CoordinatorWorkflowID(p)
		g := WorkerGone{WorkerID: st.WorkerID, Shards: byPipeline[p], Reason: "lease heartbeat timed out: " + st.LastErr, Instance: instance}
		if err := workflow.SignalExternalWorkflow(ctx, id, "", SignalWorkerGone, g).Get(ctx, nil); err != nil {
			errs = append(errs, fmt.Errorf("tell %s: %w", id, err))
			continue
		}
		st.Told = append(st.Told, id)
	}
	return errors.Join(errs...)
}

// startHandoffs starts one handoff per orphaned shard, as children that
// outlive this workflow.
func startHandoffs(ctx workflow.Context, st *LeaseState, held []activities.HeldShard) error {
	var futures []workflow.ChildWorkflowFuture
	for _, h := range held {
		id := HandoffWorkflowID(h.Pipeline, h.Shard)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:        id,
			TaskQueue:         ControlTaskQueue,
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
		})
		from := Owner{WorkerID: h.WorkerID, TaskQueue: h.TaskQueue, Epoch: h.Epoch}
		f := workflow.ExecuteChildWorkflow(cctx, HandoffWorkflow, HandoffInput{
			Pipeline: h.Pipeline, Shard: h.Shard, From: &from, FromDead: true,
		})
		futures = append(futures, f)
		st.Handoffs = append(st.Handoffs, id)
	}
	// Wait until each child has started (not finished) so the handoffs
	// exist before this workflow completes. A handoff already running was
	// started by the shard's new owner: it goes on without us.
	var errs []error
	for i, f := range futures {
		if err := f.GetChildWorkflowExecution().Get(ctx, nil); err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			errs = append(errs, fmt.Errorf("start handoff %s: %w", st.Handoffs[i], err))
		}
	}
	return errors.Join(errs...)
}
