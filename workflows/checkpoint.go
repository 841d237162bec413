package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// Breaker states as the checkpoint workflow reports them (and as the
// TfloBreakerState search attribute shows them).
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

// Owner is who owns a shard right now: the owner tells the checkpoint
// workflow itself (signal-with-start of SignalOwner) when it gains the
// shard. Ownership is decided on the data plane, never by the workflow.
type Owner struct {
	WorkerID  string          `json:"worker_id"`
	TaskQueue string          `json:"task_queue"`
	Epoch     streaming.Epoch `json:"epoch"`
}

// CheckpointNow is the payload of SignalCheckpointNow.
type CheckpointNow struct {
	Reason string `json:"reason,omitempty"`
}

// CheckpointInput starts a checkpoint workflow for one shard of a pipeline.
// Zero durations and counts take the defaults documented on each field.
type CheckpointInput struct {
	Pipeline string            `json:"pipeline"`
	Shard    streaming.ShardID `json:"shard"`
	// Interval between checkpoints (default 10s).
	Interval time.Duration `json:"interval,omitempty"`
	// Owner, when already known at start.
	Owner *Owner `json:"owner,omitempty"`
	// BreakerThreshold consecutive failed checkpoints open the breaker
	// (default 3).
	BreakerThreshold int `json:"breaker_threshold,omitempty"`
	// BreakerCoolDown is how long an open breaker skips checkpoints before
	// one half-open probe (default 1m).
	BreakerCoolDown time.Duration `json:"breaker_cool_down,omitempty"`
	// Stage start-to-close deadlines (defaults in package activities).
	SnapshotTimeout time.Duration `json:"snapshot_timeout,omitempty"`
	SaveTimeout     time.Duration `json:"save_timeout,omitempty"`
	CommitTimeout   time.Duration `json:"commit_timeout,omitempty"`
	// StageAttempts is the retry budget of each stage (default 3).
	StageAttempts int32 `json:"stage_attempts,omitempty"`
	// ContinueAsNewAfter checkpoints attempted in one run (default 200;
	// the server's suggestion is honoured earlier).
	ContinueAsNewAfter int `json:"continue_as_new_after,omitempty"`
	// State carries the workflow's state across continue-as-new.
	State *CheckpointState `json:"state,omitempty"`
}

// Validate reports the first problem with the input, as a sentence.
func (in CheckpointInput) Validate() error {
	switch {
	case in.Pipeline == "":
		return errors.New("checkpoint workflow: pipeline is empty")
	case in.Shard == "":
		return errors.New("checkpoint workflow: shard is empty")
	case in.Interval < 0, in.BreakerCoolDown < 0, in.SnapshotTimeout < 0, in.SaveTimeout < 0, in.CommitTimeout < 0:
		return fmt.Errorf("checkpoint workflow %s/%s: durations must not be negative", in.Pipeline, in.Shard)
	case in.BreakerThreshold < 0, in.StageAttempts < 0, in.ContinueAsNewAfter < 0:
		return fmt.Errorf("checkpoint workflow %s/%s: counts must not be negative", in.Pipeline, in.Shard)
	}
	return nil
}

func (in CheckpointInput) withDefaults() CheckpointInput {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&in.Interval, 10*time.Second)
	def(&in.BreakerCoolDown, time.Minute)
	def(&in.SnapshotTimeout, activities.DefaultSnapshotTimeout)
	def(&in.SaveTimeout, activities.DefaultSaveTimeout)
	def(&in.CommitTimeout, activities.DefaultCommitTimeout)
	if in.BreakerThreshold == 0 {
		in.BreakerThreshold = 3
	}
	if in.StageAttempts == 0 {
		in.StageAttempts = 3
	}
	if in.ContinueAsNewAfter == 0 {
		in.ContinueAsNewAfter = 200
	}
	return in
}

// CheckpointState is what the status query returns, and what the workflow
// carries across continue-as-new.
type CheckpointState struct {
	Pipeline string            `json:"pipeline"`
	Shard    streaming.ShardID `json:"shard"`
	Owner    *Owner            `json:"owner,omitempty"`
	// Previous is the owner before Owner, kept when Owner is replaced or
	// cleared (a NotOwner answer: the shard moved): the next owner's
	// handoff names it, to verify its final checkpoint.
	Previous *Owner `json:"previous,omitempty"`

	LastID          uint64        `json:"last_id"`
	LastCursor      string        `json:"last_cursor,omitempty"`
	LastDuration    time.Duration `json:"last_duration"`
	LastBytes       int64         `json:"last_bytes"`
	LastRequests    int           `json:"last_requests"`
	LastKeys        int           `json:"last_keys"`
	LastCompletedAt time.Time     `json:"last_completed_at"`

	Breaker             string    `json:"breaker"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	BreakerOpenedAt     time.Time `json:"breaker_opened_at"`
	LastError           string    `json:"last_error,omitempty"`

	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Skipped   int64 `json:"skipped"`
	// Generation counts continue-as-new runs.
	Generation int `json:"generation"`
	// PendingNow is a checkpoint-now request not yet served; carried across
	// continue-as-new so no request is lost.
	PendingNow bool `json:"pending_now,omitempty"`
	Stopping   bool `json:"stopping,omitempty"`
}

// CheckpointWorkflow runs a shard's checkpoints: on every Interval, or at
// once on SignalCheckpointNow, it runs snapshot → save state → commit cursor
// as three activities on the owner's task queue, each with its own deadline
// and retry policy, and a circuit breaker over consecutive failures. It
// waits (without checkpointing) until an owner is known, follows owner
// changes (SignalOwner, higher epochs only), answers QueryStatus, keeps the
// search attributes current, and continues as new before history grows
// large. SignalStop ends it, returning the final state.
func CheckpointWorkflow(ctx workflow.Context, in CheckpointInput) (CheckpointState, error) {
	if err := in.Validate(); err != nil {
		return CheckpointState{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeBadInput, nil)
	}
	w := &checkpointRun{in: in.withDefaults()}
	return w.run(ctx)
}

type checkpointRun struct {
	in      CheckpointInput
	st      CheckpointState
	attempt int // checkpoints attempted in this run
}

func (w *checkpointRun) run(ctx workflow.Context) (CheckpointState, error) {
	if w.in.State != nil {
		w.st = *w.in.State
		w.st.Generation++
	} else {
		w.st = CheckpointState{Pipeline: w.in.Pipeline, Shard: w.in.Shard, Breaker: BreakerClosed}
	}
	w.acceptOwner(w.in.Owner)
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (CheckpointState, error) { return w.st, nil }); err != nil {
		return w.st, err
	}
	w.upsertSearch(ctx, false)

	nowCh := workflow.GetSignalChannel(ctx, SignalCheckpointNow)
	ownerCh := workflow.GetSignalChannel(ctx, SignalOwner)
	stopCh := workflow.GetSignalChannel(ctx, SignalStop)
	lastAttempt := workflow.Now(ctx)

	for {
		due := w.st.PendingNow || !workflow.Now(ctx).Before(lastAttempt.Add(w.in.Interval))
		if w.st.Stopping {
			return w.st, nil
		}
		if !due || w.st.Owner == nil {
			w.wait(ctx, lastAttempt, nowCh, ownerCh, stopCh)
			continue
		}
		w.st.PendingNow = false
		lastAttempt = workflow.Now(ctx)
		w.checkpointOnce(ctx)
		w.attempt++

		if w.attempt >= w.in.ContinueAsNewAfter || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			w.drain(nowCh, ownerCh, stopCh)
			if w.st.Stopping {
				return w.st, nil
			}
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return w.st, err
			}
			next := w.in
			st := w.st
			next.State = &st
			next.Owner = nil
			return w.st, workflow.NewContinueAsNewError(ctx, CheckpointWorkflow, next)
		}
	}
}

// wait blocks until the next checkpoint is due or a signal arrives.
func (w *checkpointRun) wait(ctx workflow.Context, lastAttempt time.Time, nowCh, ownerCh, stopCh workflow.ReceiveChannel) {
	sel := workflow.NewSelector(ctx)
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	if w.st.Owner != nil {
		d := lastAttempt.Add(w.in.Interval).Sub(workflow.Now(ctx))
		if d < time.Millisecond {
			d = time.Millisecond
		}
		sel.AddFuture(workflow.NewTimer(timerCtx, d), func(workflow.Future) {})
	}
	w.addSignals(sel, nowCh, ownerCh, stopCh)
	sel.Select(ctx)
}

func (w *checkpointRun) addSignals(sel workflow.Selector, nowCh, ownerCh, stopCh workflow.ReceiveChannel) {
	sel.AddReceive(nowCh, func(c workflow.ReceiveChannel, _ bool) {
		var req CheckpointNow
		c.ReceiveAsync(&req)
		w.st.PendingNow = true
	})
	sel.AddReceive(ownerCh, func(c workflow.ReceiveChannel, _ bool) {
		var o Owner
		c.ReceiveAsync(&o)
		w.acceptOwner(&o)
	})
	sel.AddReceive(stopCh, func(c workflow.ReceiveChannel, _ bool) {
		c.ReceiveAsync(nil)
		w.st.Stopping = true
	})
}

// drain consumes every buffered signal so none is lost at continue-as-new.
func (w *checkpointRun) drain(nowCh, ownerCh, stopCh workflow.ReceiveChannel) {
	for {
		var req CheckpointNow
		var o Owner
		switch {
		case nowCh.ReceiveAsync(&req):
			w.st.PendingNow = true
		case ownerCh.ReceiveAsync(&o):
			w.acceptOwner(&o)
		case stopCh.ReceiveAsync(nil):
			w.st.Stopping = true
		default:
			return
		}
	}
}

// acceptOwner takes o if it is at least as new as the owner we know of; a
// late signal from an older epoch is ignored.
func (w *checkpointRun) acceptOwner(o *Owner) {
	if o == nil || o.TaskQueue == "" {
		return
	}
	if w.st.Owner != nil && o.Epoch < w.st.Owner.Epoch {
		return
	}
	if w.st.Owner != nil && (w.st.Owner.TaskQueue != o.TaskQueue || w.st.Owner.Epoch != o.Epoch) {
		w.st.Previous = w.st.Owner
	}
	cp := *o
	w.st.Owner = &cp
}

// checkpointOnce runs one checkpoint under the breaker.
func (w *checkpointRun) checkpointOnce(ctx workflow.Context) {
	now := workflow.Now(ctx)
	if w.st.Breaker == BreakerOpen {
		if now.Before(w.st.BreakerOpenedAt.Add(w.in.BreakerCoolDown)) {
			w.st.Skipped++
			return
		}
		w.st.Breaker = BreakerHalfOpen
		w.upsertSearch(ctx, false)
	}
	owner := *w.st.Owner
	ref := activities.ShardRef{Pipeline: w.in.Pipeline, Shard: w.in.Shard, Epoch: owner.Epoch}
	start := now
	res, err := w.stages(ctx, owner.TaskQueue, ref)
	if err == nil {
		w.st.LastID = res.id
		w.st.LastCursor = res.cursor
		w.st.LastBytes = res.bytes
		w.st.LastRequests = res.requests
		w.st.LastKeys = res.keys
		w.st.LastCompletedAt = workflow.Now(ctx)
		w.st.LastDuration = w.st.LastCompletedAt.Sub(start)
		w.st.Completed++
		w.st.ConsecutiveFailures = 0
		w.st.LastError = ""
		w.st.Breaker = BreakerClosed
		w.upsertSearch(ctx, true)
		return
	}
	w.st.LastError = err.Error()
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeNotOwner {
		// Not a health failure: the shard moved. Wait for the next
		// owner's signal rather than counting towards the breaker.
		if w.st.Owner != nil && w.st.Owner.Epoch == owner.Epoch {
			w.st.Previous, w.st.Owner = w.st.Owner, nil
		}
		return
	}
	w.st.Failed++
	w.st.ConsecutiveFailures++
	if w.st.Breaker == BreakerHalfOpen || w.st.ConsecutiveFailures >= w.in.BreakerThreshold {
		w.st.Breaker = BreakerOpen
		w.st.BreakerOpenedAt = workflow.Now(ctx)
	}
	w.upsertSearch(ctx, false)
}

type stageResults struct {
	id       uint64
	cursor   string
	keys     int
	bytes    int64
	requests int
}

func (w *checkpointRun) stageOptions(ctx workflow.Context, queue string, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: queue,
		// A dead owner never picks the task up: fail rather than wait.
		ScheduleToStartTimeout: timeout,
		StartToCloseTimeout:    timeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        timeout,
			MaximumAttempts:        w.in.StageAttempts,
			NonRetryableErrorTypes: []string{activities.ErrTypeNotOwner, activities.ErrTypeOutOfOrder, activities.ErrTypeBadInput},
		},
	})
}

func (w *checkpointRun) stages(ctx workflow.Context, queue string, ref activities.ShardRef) (stageResults, error) {
	var a *activities.Checkpoints
	var snap activities.SnapshotResult
	if err := workflow.ExecuteActivity(w.stageOptions(ctx, queue, w.in.SnapshotTimeout), a.Snapshot, ref).Get(ctx, &snap); err != nil {
		return stageResults{}, fmt.Errorf("snapshot: %w", err)
	}
	stage := activities.StageInput{ShardRef: ref, CheckpointID: snap.CheckpointID}
	var saved activities.SaveResult
	if err := workflow.ExecuteActivity(w.stageOptions(ctx, queue, w.in.SaveTimeout), a.SaveState, stage).Get(ctx, &saved); err != nil {
		return stageResults{}, fmt.Errorf("save state of checkpoint %d: %w", snap.CheckpointID, err)
	}
	var committed activities.CommitResult
	if err := workflow.ExecuteActivity(w.stageOptions(ctx, queue, w.in.CommitTimeout), a.CommitCursor, stage).Get(ctx, &committed); err != nil {
		return stageResults{}, fmt.Errorf("commit cursor of checkpoint %d: %w", snap.CheckpointID, err)
	}
	cursor := committed.Cursor
	if cursor == "" {
		cursor = snap.Cursor
	}
	return stageResults{id: snap.CheckpointID, cursor: cursor, keys: snap.Keys, bytes: saved.Bytes, requests: saved.Requests}, nil
}

func (w *checkpointRun) upsertSearch(ctx workflow.Context, completed bool) {
	ups := []temporal.SearchAttributeUpdate{
		SearchPipeline.ValueSet(w.in.Pipeline),
		SearchShard.ValueSet(string(w.in.Shard)),
		SearchBreakerState.ValueSet(w.st.Breaker),
	}
	if completed || !w.st.LastCompletedAt.IsZero() {
		ups = append(ups, SearchLastCheckpoint.ValueSet(w.st.LastCompletedAt))
	}
	// Failing to upsert only degrades visibility; the checkpoint stands.
	if err := workflow.UpsertTypedSearchAttributes(ctx, ups...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}
