package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// continueAsNewEvents is the history length past which a coordinator run
// continues as new even before ContinueAsNewAfter rounds.
const continueAsNewEvents = 10_000

// CoordinatorWorkflow is a pipeline's checkpoint coordinator, modelled on
// Flink's CheckpointCoordinator. It runs numbered rounds — on the
// interval, or at once on UpdateCheckpointNow — and a round is one
// activity per live worker, on the worker's own queue, that checkpoints
// every shard the worker owns (activities.CheckpointHost); each shard
// commits on its own, fenced by its epoch, and the round records every
// shard's result. Temporal's cost per round is O(workers), whatever the
// number of shards.
//
// Owners come from the workers (UpdateAnnounce, update-with-start): the
// validator refuses stale epochs, the handler records the owner, returns
// the previous one and, when a shard moved between workers, starts its
// HandoffWorkflow (whose final checkpoint is a one-worker round). A lease
// workflow tells it a worker died (SignalWorkerGone): that worker leaves
// the rounds at once, and its shards rejoin them when their next owners
// announce themselves.
//
// One breaker counts consecutive rounds with storage failures; a worker
// that cannot be reached (schedule-to-start timeout), a shard that moved,
// or a stale epoch never count. Announcements, checkpoint-now requests,
// worker-gone notices and stop are all handled while a round is in flight.
// It keeps its search attributes (TfloPipeline, TfloBreakerState) current
// by upserting on change, shows the round as current details, answers
// QueryStatus, QueryShards and QueryShardsPage, and continues as new
// before its history grows large, after draining signals and waiting for
// its handlers.
// SignalStop ends it (an in-flight round is cut short: shards that
// committed stay committed), returning its state.
//
// Its continue-as-new input and its result carry the per-shard table
// whole up to 1,000 shards, and past that folded by owner
// (CoordinatorState.Groups): a few dozen bytes a shard,
// so 20,000 shards stay well under Temporal's 2 MB payload limit. The
// next run has every shard's owner, epoch, status, last round and
// checkpoint id; cursors, bytes and durations come back with the next
// round that checkpoints the shard, and only a few hundred errors and
// handoffs are carried (running handoffs first).
func CoordinatorWorkflow(ctx workflow.Context, in CoordinatorInput) (CoordinatorState, error) {
	if err := in.Validate(); err != nil {
		return CoordinatorState{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeBadInput, nil)
	}
	c := &coordinator{in: in.WithDefaults()}
	return c.run(ctx)
}

type coordinator struct {
	in CoordinatorInput
	st CoordinatorState

	// Not carried across continue-as-new: rebuilt or drained first.
	inFlight      *roundRun
	nextRoundAt   time.Time
	stopping      bool
	stopReason    string
	finished      uint64           // the last round that finished
	waited        []RoundSummary   // rounds checkpoint-now callers wait for (Round set, the rest once done)
	pendingStarts int              // handoffs whose start is not confirmed yet
	notices       int              // breaker notices not answered yet
	running       []runningHandoff // handoffs started in this run whose result is awaited
	roundsThisRun int
	wantRound     uint64   // the highest round a checkpoint-now request waits for
	reasons       []string // why the next round runs (checkpoint-now reasons)
	announced     bool     // an announcement came while waiting
}

// runningHandoff is a handoff child started in this run, not ended yet.
type runningHandoff struct {
	shard streaming.ShardID
	to    Owner
	id    string
}

// roundRun is the round in flight.
type roundRun struct {
	summary RoundSummary
	shares  []*share
	pending int
}

// Why a share's results are discarded: the coordinator stops, or the
// share's worker was declared gone.
const (
	skippedStopped = "stopped"
	skippedGone    = "worker gone"
)

// share is one worker's part of a round.
type share struct {
	worker  string
	in      activities.RoundInput
	f       workflow.Future
	cancel  workflow.CancelFunc
	done    bool
	skipped string // why its results are discarded (the worker left)
}

// unanswered reports whether a share has not answered yet. One whose answer
// came in the workflow task that brings a stop or a gone notice is done,
// though its goroutine has not recorded it yet: its shards committed
// (histories before the version discarded the answer).
func (c *coordinator) unanswered(ctx workflow.Context, sh *share) bool {
	if sh.done {
		return false
	}
	if !sh.f.IsReady() {
		return true
	}
	return workflow.GetVersion(ctx, "record-share-answered-with-stop-or-gone", workflow.DefaultVersion, 1) < 1
}

func (c *coordinator) run(ctx workflow.Context) (CoordinatorState, error) {
	if c.in.State != nil {
		c.st = *c.in.State
		c.st.Shards, c.st.Groups, c.st.Notes = c.st.Table(), nil, nil
		c.st.Generation++
		c.in.State = nil
	} else {
		c.st = CoordinatorState{Pipeline: c.in.Pipeline, Breaker: BreakerClosed}
	}
	c.finished = c.st.Round
	if err := c.setHandlers(ctx); err != nil {
		return c.st, err
	}
	if c.st.Generation == 0 {
		c.upsertSearch(ctx, true)
	}
	c.showDetails(ctx)

	stopCh := workflow.GetSignalChannel(ctx, SignalStop)
	goneCh := workflow.GetSignalChannel(ctx, SignalWorkerGone)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var req StopRequest
			stopCh.Receive(ctx, &req)
			c.stop(ctx, req)
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var g WorkerGone
			goneCh.Receive(ctx, &g)
			c.workerGone(ctx, g)
		}
	})

	// Histories of release 574a995 started each interval when the
	// previous round started.
	cadence := workflow.GetVersion(ctx, "round-cadence", workflow.DefaultVersion, 1) >= 1
	// A run without rounds (manual, or nothing to checkpoint) still grows
	// with announcements and handoffs: it continues as new while idle too
	// (histories before the version checked only after a round).
	idleCAN := workflow.GetVersion(ctx, "continue-as-new-while-idle", workflow.DefaultVersion, 1) >= 1
	last := workflow.Now(ctx)
	for {
		if err := ctx.Err(); err != nil {
			// Cancelled: every Await and timer now returns at once, so
			// the loop would spin without yielding. End as cancelled,
			// once the handlers are done and the handoffs they answered
			// with have started: the server never starts the child of a
			// parent that closed first, abandoned or not (histories
			// before the version ended at once).
			if workflow.GetVersion(ctx, "start-handoffs-before-cancel", workflow.DefaultVersion, 1) >= 1 {
				dctx, _ := workflow.NewDisconnectedContext(ctx)
				_ = workflow.Await(dctx, func() bool { return workflow.AllHandlersFinished(dctx) && c.pendingStarts == 0 })
			}
			return c.st, err
		}
		if c.stopping {
			return c.finish(ctx)
		}
		requested := c.wantRound > c.st.Round
		due := requested
		if !due && !c.in.Manual && c.paused(ctx).IsZero() && c.hasWork() {
			due = !workflow.Now(ctx).Before(last.Add(c.in.Interval.D()))
		}
		if !due {
			if idleCAN && c.wantRound <= c.st.Round && c.shouldContinueAsNew(ctx) {
				if st, ended, err := c.continueAsNew(ctx, stopCh, goneCh); ended {
					return st, err
				}
				continue
			}
			c.wait(ctx, last)
			continue
		}
		// Rounds keep their cadence: the next is due an interval after
		// this one was due, not after it started (a timer fires late by a
		// workflow task); one that overran starts the count afresh.
		now := workflow.Now(ctx)
		if last = last.Add(c.in.Interval.D()); !cadence || requested || now.Sub(last) >= c.in.Interval.D() {
			last = now
		}
		c.runRound(ctx)
		if c.stopping {
			return c.finish(ctx)
		}
		if c.wantRound <= c.st.Round && c.shouldContinueAsNew(ctx) {
			if st, ended, err := c.continueAsNew(ctx, stopCh, goneCh); ended {
				return st, err
			}
			// A checkpoint-now request came while draining: its round
			// runs first, and the next boundary continues as new.
		}
	}
}

// hasWork reports whether some live worker owns a shard to checkpoint.
func (c *coordinator) hasWork() bool { return len(c.plan()) > 0 }

// coolDownEnd is when the breaker's cool-down ends (meaningful while it
// is open).
func (c *coordinator) coolDownEnd() time.Time {
	return c.st.BreakerOpenedAt.Add(c.in.BreakerCoolDown.D())
}

// paused returns the end of an open breaker's cool-down, or zero when the
// breaker lets rounds run (closed, or due for its half-open probe).
func (c *coordinator) paused(ctx workflow.Context) time.Time {
	if c.st.Breaker != BreakerOpen {
		return time.Time{}
	}
	until := c.coolDownEnd()
	if !workflow.Now(ctx).Before(until) {
		c.st.Breaker = BreakerHalfOpen
		c.upsertSearch(ctx, false)
		// The details said when rounds resume: without work to probe
		// with, no round comes to refresh them.
		c.showDetails(ctx)
		return time.Time{}
	}
	return until
}

// wait blocks until the next round is due, a checkpoint-now request or a
// stop arrives, the breaker's cool-down ends, or — with nothing to
// checkpoint — until an announcement brings shards.
func (c *coordinator) wait(ctx workflow.Context, last time.Time) {
	var next time.Time
	switch {
	case !c.paused(ctx).IsZero():
		next = c.paused(ctx)
	case !c.in.Manual && c.hasWork():
		next = last.Add(c.in.Interval.D())
	}
	c.nextRoundAt = next
	c.announced = false
	defer func() { c.nextRoundAt = time.Time{} }()
	cond := func() bool { return c.stopping || c.wantRound > c.st.Round || (next.IsZero() && c.announced) }
	if next.IsZero() {
		_ = workflow.Await(ctx, cond)
		return
	}
	d := max(next.Sub(workflow.Now(ctx)), time.Millisecond)
	// The timer's summary is the last round's story: the web UI lists
	// timers with their summaries on a workflow's first screen (its
	// history), where the current details are a tab away.
	_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: d, TimerOptions: workflow.TimerOptions{Summary: c.waitSummary(next)}}, cond)
}

// waitSummary is the summary of the timer before the round due at next:
// "round 1234: 12 workers, 480 shards, 3.2 MB, 850ms, 0 failed; next at
// 10:04:05", or why rounds wait.
func (c *coordinator) waitSummary(next time.Time) string {
	at := next.UTC().Format(time.TimeOnly)
	switch {
	case c.st.Breaker == BreakerOpen:
		return fmt.Sprintf("breaker open after %d failed rounds; rounds resume at %s", c.st.ConsecutiveFailures, at)
	case c.st.Last != nil:
		return fmt.Sprintf("%s; next at %s", c.st.Last, at)
	default:
		return fmt.Sprintf("first round at %s", at)
	}
}

func (c *coordinator) setHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (CoordinatorStatus, error) {
		st := CoordinatorStatus{CoordinatorState: c.st, NextRoundAt: c.nextRoundAt, Stopping: c.stopping}
		st.Shards = nil
		st.Workers = slices.Clone(c.st.Workers)
		if c.inFlight != nil {
			s := c.inFlight.summary
			st.InFlight = &s
		}
		return st, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryShards, func() ([]ShardRow, error) {
		return slices.Clone(c.st.Shards), nil
	}); err != nil {
		return err
	}
	// A query adds no event to the history and issues no command: a
	// new one needs no workflow.GetVersion.
	if err := workflow.SetQueryHandler(ctx, QueryShardsPage, func(req ShardsPageRequest) (ShardsPage, error) {
		return shardsPage(c.st.Shards, req), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateAnnounce, c.announce, workflow.UpdateHandlerOptions{
		Validator: c.validateAnnouncement,
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateCheckpointNow, c.checkpointNow, workflow.UpdateHandlerOptions{
		Validator: func(req CheckpointNowRequest) error {
			if c.stopping {
				return temporal.NewApplicationError(fmt.Sprintf("checkpoint coordinator of %s is stopping", c.in.Pipeline), ErrTypeStopping)
			}
			return nil
		},
	})
}

// checkpointNow asks for a round that starts after the request (the next
// one, even while one is in flight) and returns its summary.
func (c *coordinator) checkpointNow(ctx workflow.Context, req CheckpointNowRequest) (RoundSummary, error) {
	want := c.st.Round + 1
	c.wantRound = max(c.wantRound, want)
	if req.Reason != "" {
		c.reasons = append(c.reasons, req.Reason)
	}
	if c.waitedFor(want) == nil {
		c.waited = append(c.waited, RoundSummary{Round: want})
	}
	if err := workflow.Await(ctx, func() bool { return c.finished >= want || c.stopping }); err != nil {
		return RoundSummary{}, err
	}
	if c.finished < want {
		return RoundSummary{}, temporal.NewApplicationError(
			fmt.Sprintf("checkpoint coordinator of %s stopped before round %d: %s", c.in.Pipeline, want, c.stopReason), ErrTypeStopping)
	}
	var s RoundSummary
	if w := c.waitedFor(want); w != nil {
		s = *w
	}
	if s.Shards == 0 {
		return s, temporal.NewApplicationError(
			fmt.Sprintf("checkpoint coordinator of %s: no live worker has announced a shard yet", c.in.Pipeline), ErrTypeNoShards)
	}
	return s, nil
}

// Error types of the coordinator's update failures.
const (
	// ErrTypeStaleEpoch: an announcement's epoch is below (or equal to,
	// from another worker) the owner's the coordinator knows.
	ErrTypeStaleEpoch = "StaleEpoch"
	// ErrTypeStopping: the coordinator is stopping.
	ErrTypeStopping = "Stopping"
	// ErrTypeNoShards: checkpoint now found no shard to checkpoint.
	ErrTypeNoShards = "NoShards"
)

func (c *coordinator) validateAnnouncement(a Announcement) error {
	if a.WorkerID == "" || a.TaskQueue == "" {
		return temporal.NewApplicationError(fmt.Sprintf("announcement to the coordinator of %s: worker id and task queue are required", c.in.Pipeline), activities.ErrTypeBadInput)
	}
	if len(a.Shards)+len(a.Released) == 0 {
		return temporal.NewApplicationError(fmt.Sprintf("announcement of worker %q to the coordinator of %s names no shard", a.WorkerID, c.in.Pipeline), activities.ErrTypeBadInput)
	}
	if c.stopping {
		return temporal.NewApplicationError(fmt.Sprintf("checkpoint coordinator of %s is stopping", c.in.Pipeline), ErrTypeStopping)
	}
	// Every stale shard is named (the error's details), so the worker
	// drops them and announces the rest again in one announcement: told
	// only of the first, it announced each shard on its own, an update in
	// this history per shard.
	var stale []activities.ShardEpoch
	var first string
	for _, s := range a.Shards {
		if s.Shard == "" {
			return temporal.NewApplicationError(fmt.Sprintf("announcement of worker %q to the coordinator of %s names a shard without a name", a.WorkerID, c.in.Pipeline), activities.ErrTypeBadInput)
		}
		row := c.row(s.Shard)
		if row == nil || row.Owner.WorkerID == "" {
			continue
		}
		if s.Epoch < row.Owner.Epoch || (s.Epoch == row.Owner.Epoch && row.Owner.WorkerID != a.WorkerID) {
			if first == "" {
				first = fmt.Sprintf("announcement of shard %s/%s by worker %q at epoch %d is stale: worker %q owns it at epoch %d",
					c.in.Pipeline, s.Shard, a.WorkerID, s.Epoch, row.Owner.WorkerID, row.Owner.Epoch)
			}
			stale = append(stale, s)
		}
	}
	if len(stale) > 1 {
		first += fmt.Sprintf(" (and %d more of its shards are stale)", len(stale)-1)
	}
	if len(stale) > 0 {
		return temporal.NewApplicationError(first, ErrTypeStaleEpoch, stale)
	}
	return nil
}

// announce records a worker's shards and starts the handoff of each shard
// that moved from another worker.
func (c *coordinator) announce(ctx workflow.Context, a Announcement) (AnnounceResult, error) {
	wr := c.worker(a.WorkerID, a.TaskQueue)
	wr.Status, wr.Unreachable, wr.Instance = WorkerLive, 0, a.Instance
	me := Owner{WorkerID: a.WorkerID, TaskQueue: a.TaskQueue}
	var res AnnounceResult
	for _, s := range a.Shards {
		me.Epoch = s.Epoch
		row := c.row(s.Shard)
		if row == nil {
			row = c.addRow(s.Shard)
		}
		if row.Owner == me && row.Status != ShardOwnerGone && row.Status != ShardReleased && row.Status != ShardNotOwner {
			continue // announced before: nothing changes
		}
		prev := row.Owner
		prevGone := row.Status == ShardOwnerGone
		row.Owner, row.Status, row.Error = me, ShardNew, ""
		if prev.WorkerID == "" || prev.WorkerID == me.WorkerID {
			continue
		}
		p := PreviousOwner{Shard: s.Shard, Owner: prev, Gone: prevGone}
		p.Handoff = c.startHandoff(ctx, s.Shard, prev, prevGone, me)
		row.Handoff = fmt.Sprintf("%s@%d → %s@%d: started %s", prev.WorkerID, prev.Epoch, me.WorkerID, me.Epoch, p.Handoff)
		res.Previous = append(res.Previous, p)
	}
	for _, s := range a.Released {
		if row := c.row(s.Shard); row != nil && row.Owner.WorkerID == a.WorkerID && row.Owner.Epoch == s.Epoch {
			row.Status = ShardReleased
		}
	}
	c.countShards()
	c.dropMovedShares()
	c.announced = true
	c.showDetails(ctx)
	res.Coordinator = workflow.GetInfo(ctx).FirstRunID
	res.Round, res.Breaker = c.st.Round, c.st.Breaker
	if c.st.Breaker == BreakerOpen {
		res.BreakerUntil = c.coolDownEnd()
	}
	res.Interval, res.MaxCheckpointAge = c.in.Interval, c.in.MaxCheckpointAge
	return res, nil
}

// startHandoff starts the HandoffWorkflow of a shard that moved (a child
// that outlives this run) and returns its id.
func (c *coordinator) startHandoff(ctx workflow.Context, shard streaming.ShardID, from Owner, fromDead bool, to Owner) string {
	id := HandoffWorkflowIDAt(c.in.Pipeline, shard, to.Epoch)
	// Disconnected: a child's context cancelled (the coordinator was) asks
	// the server to cancel the child, and the abandon policy does not
	// stop that; a handoff cut short never restores or resumes the shard.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	cctx := workflow.WithChildOptions(dctx, workflow.ChildWorkflowOptions{
		WorkflowID:        id,
		TaskQueue:         ControlTaskQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
		StaticSummary:     fmt.Sprintf("move %s/%s: %s@%d → %s@%d", c.in.Pipeline, shard, from.WorkerID, from.Epoch, to.WorkerID, to.Epoch),
	})
	f := workflow.ExecuteChildWorkflow(cctx, HandoffWorkflow, HandoffInput{
		Pipeline: c.in.Pipeline, Shard: shard, From: &from, FromDead: fromDead, To: &to,
		StepTimeout: c.in.HandoffStepTimeout.D(), FinalRound: true,
	})
	c.pendingStarts++
	c.running = append(c.running, runningHandoff{shard: shard, to: to, id: id})
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() {
			c.running = slices.DeleteFunc(c.running, func(r runningHandoff) bool { return r.id == id && r.shard == shard })
		}()
		err := f.GetChildWorkflowExecution().Get(ctx, nil)
		c.pendingStarts--
		if err != nil {
			c.noteHandoff(shard, to, "not started: "+err.Error())
			return
		}
		var hs HandoffState
		err = f.Get(ctx, &hs)
		switch {
		case err != nil:
			c.noteHandoff(shard, to, "failed: "+err.Error())
		case hs.FinalCheckpoint != nil:
			c.noteHandoff(shard, to, fmt.Sprintf("done in %s, final checkpoint %d", hs.Duration.Round(time.Millisecond), hs.FinalCheckpoint.CheckpointID))
		default:
			c.noteHandoff(shard, to, fmt.Sprintf("done in %s, %s", hs.Duration.Round(time.Millisecond), hs.FinalCheckpointSkipped))
		}
	})
	return id
}

func (c *coordinator) noteHandoff(shard streaming.ShardID, to Owner, what string) {
	row := c.row(shard)
	if row == nil || row.Owner != to {
		return
	}
	if i := strings.LastIndex(row.Handoff, ": "); i >= 0 {
		row.Handoff = row.Handoff[:i+2] + what
	}
}

// workerGone takes a dead worker out of the rounds; its shards wait for
// their next owners. A notice about an earlier run of the worker than the
// one that announced last is stale (the process died and another took
// its worker id, announcing before the old lease timed out): the live run
// stays in the rounds (histories before the version applied it).
func (c *coordinator) workerGone(ctx workflow.Context, g WorkerGone) {
	if g.WorkerID == "" {
		return
	}
	wr := c.findWorker(g.WorkerID)
	if wr == nil {
		return
	}
	if g.Instance != "" && wr.Instance != "" && g.Instance != wr.Instance &&
		workflow.GetVersion(ctx, "ignore-worker-gone-of-an-earlier-run", workflow.DefaultVersion, 1) >= 1 {
		workflow.GetLogger(ctx).Info("worker-gone notice about an earlier run of the worker ignored",
			"worker", g.WorkerID, "notice_instance", g.Instance, "announced_instance", wr.Instance, "reason", g.Reason)
		return
	}
	wr.Status = WorkerGoneStatus
	for i := range c.st.Shards {
		row := &c.st.Shards[i]
		if row.Owner.WorkerID == g.WorkerID {
			row.Status = ShardOwnerGone
			row.Error = "owner declared dead: " + g.Reason
		}
	}
	if r := c.inFlight; r != nil {
		for _, sh := range r.shares {
			if sh.worker == g.WorkerID && c.unanswered(ctx, sh) {
				sh.skipped = skippedGone
				sh.cancel()
			}
		}
	}
	c.countShards()
	c.showDetails(ctx)
}

func (c *coordinator) stop(ctx workflow.Context, req StopRequest) {
	c.stopping = true
	c.stopReason = req.Reason
	if c.stopReason == "" {
		c.stopReason = "stop requested"
	}
	if r := c.inFlight; r != nil {
		for _, sh := range r.shares {
			if c.unanswered(ctx, sh) {
				r.summary.Cut = true
				sh.skipped = skippedStopped
				sh.cancel()
			}
		}
	}
}

// dropMovedShares stops waiting for a worker's share whose shards have
// all moved to other owners while the round runs.
func (c *coordinator) dropMovedShares() {
	r := c.inFlight
	if r == nil {
		return
	}
	for _, sh := range r.shares {
		if sh.done {
			continue
		}
		moved := true
		for _, se := range sh.in.Shards {
			if row := c.row(se.Shard); row != nil && row.Owner.WorkerID == sh.worker && row.Owner.Epoch == se.Epoch {
				moved = false
				break
			}
		}
		if moved {
			sh.skipped = "its shards moved"
			sh.cancel()
		}
	}
}

// plan groups the shards to checkpoint by live worker.
func (c *coordinator) plan() []activities.RoundInput {
	var out []activities.RoundInput
	for _, wr := range c.st.Workers {
		if wr.Status == WorkerGoneStatus {
			continue
		}
		in := activities.RoundInput{Pipeline: c.in.Pipeline, WorkerID: wr.WorkerID, Breaker: c.st.Breaker, MaxCheckpointAge: c.in.MaxCheckpointAge}
		for _, row := range c.st.Shards {
			if row.Owner.WorkerID != wr.WorkerID {
				continue
			}
			switch row.Status {
			case ShardOwnerGone, ShardReleased, ShardNotOwner:
				continue
			}
			in.Shards = append(in.Shards, activities.ShardEpoch{Shard: row.Shard, Epoch: row.Owner.Epoch})
		}
		if len(in.Shards) > 0 {
			out = append(out, in)
		}
	}
	return out
}

// runRound runs one round: one activity per live worker with shards.
func (c *coordinator) runRound(ctx workflow.Context) {
	reason := "interval"
	if c.wantRound > c.st.Round {
		reason = "checkpoint now"
		if len(c.reasons) > 0 {
			reason += ": " + strings.Join(c.reasons, "; ")
		}
	}
	c.reasons = nil
	if c.st.Breaker == BreakerOpen {
		// Asked for during the cool-down: this round is the probe, and
		// the search attribute says so while it runs (histories before
		// the version upserted only the probe's outcome).
		c.st.Breaker = BreakerHalfOpen
		if workflow.GetVersion(ctx, "upsert-probe-asked-for", workflow.DefaultVersion, 1) >= 1 {
			c.upsertSearch(ctx, false)
		}
	}
	plan := c.plan()
	c.st.Round++
	n := c.st.Round
	c.roundsThisRun++
	r := &roundRun{summary: RoundSummary{Round: n, Reason: reason, StartedAt: workflow.Now(ctx), Workers: len(plan), Breaker: c.st.Breaker}}
	for _, in := range plan {
		r.summary.Shards += len(in.Shards)
	}
	if len(plan) == 0 {
		c.endRound(ctx, r)
		return
	}
	c.inFlight = r
	c.showDetails(ctx)
	var a *activities.Rounds
	for _, in := range plan {
		in.Round = n
		wr := c.findWorker(in.WorkerID)
		actx, cancel := workflow.WithCancel(ctx)
		actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
			TaskQueue:              wr.TaskQueue,
			ScheduleToStartTimeout: c.in.ReachTimeout.D(),
			StartToCloseTimeout:    c.in.RoundTimeout.D(),
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
			Summary:                fmt.Sprintf("round %d of %s: %d shards on %s", n, c.in.Pipeline, len(in.Shards), in.WorkerID),
		})
		f := workflow.ExecuteActivity(actx, a.CheckpointRound, in)
		sh := &share{worker: in.WorkerID, in: in, f: f, cancel: cancel}
		r.shares = append(r.shares, sh)
		r.pending++
		workflow.Go(ctx, func(ctx workflow.Context) {
			var res activities.RoundResult
			err := f.Get(ctx, &res)
			sh.done = true
			r.pending--
			c.record(ctx, r, sh, res, err)
		})
	}
	_ = workflow.Await(ctx, func() bool { return r.pending == 0 })
	c.inFlight = nil
	c.endRound(ctx, r)
}

// record books one worker's answer.
func (c *coordinator) record(ctx workflow.Context, r *roundRun, sh *share, res activities.RoundResult, err error) {
	s := &r.summary
	wr := c.findWorker(sh.worker)
	// A share that ended without results speaks only for the shards its
	// worker still owns: the others changed owner while the round ran
	// (announcements drop a share only once all its shards moved).
	owned := 0
	c.eachOwnedRow(sh, func(*ShardRow) { owned++ })
	if sh.skipped != "" {
		// A stop cuts the share short (the summary says Cut): its shards
		// did not change owner. Nor did a gone worker's: they wait for
		// their next owner, a liveness matter as an unreachable worker's.
		switch sh.skipped {
		case skippedStopped:
		case skippedGone:
			s.Unreachable += owned
			s.Moved += len(sh.in.Shards) - owned
		default:
			s.Moved += len(sh.in.Shards)
		}
		return
	}
	if err != nil {
		var te *temporal.TimeoutError
		var ce *temporal.CanceledError
		if errors.As(err, &ce) {
			s.Moved += len(sh.in.Shards)
			return
		}
		if wr != nil && wr.Status == WorkerGoneStatus {
			// Failed in the task that said its worker is gone: as a
			// share cut by the notice, its shards wait for their next
			// owner (their rows keep saying so).
			s.Unreachable += owned
			s.Moved += len(sh.in.Shards) - owned
			return
		}
		s.Moved += len(sh.in.Shards) - owned
		if wr != nil && wr.Status == WorkerUnreachable && !(errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START) &&
			workflow.GetVersion(ctx, "reached-worker-failing-its-share", workflow.DefaultVersion, 1) >= 1 {
			// The worker took its share (it failed or overran it): it
			// was reached, whatever it missed before (a live worker is
			// told of the breaker; histories before the version kept it
			// unreachable).
			wr.Status, wr.Unreachable = WorkerLive, 0
		}
		switch {
		case errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			// A liveness matter (lease, handoff), not a storage failure.
			s.Unreachable += owned
			if wr != nil && wr.Status != WorkerGoneStatus {
				wr.Status = WorkerUnreachable
				wr.Unreachable++
			}
			c.eachOwnedRow(sh, func(row *ShardRow) {
				row.Status = ShardUnreachable
				row.Error = fmt.Sprintf("round %d: worker %q did not pick the round up within %s", r.summary.Round, sh.worker, c.in.ReachTimeout)
			})
		case errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
			// The worker took its share and did not finish it in time:
			// counted, as an expired checkpoint is in Flink.
			s.Failed += owned
			c.st.LastError = fmt.Sprintf("round %d on %s: %v", r.summary.Round, sh.worker, err)
			c.eachOwnedRow(sh, func(row *ShardRow) { row.Status, row.Error = ShardFailed, err.Error() })
		default:
			// The round could not run on the worker at all (it is
			// closing, or does not serve rounds): a worker matter, not
			// a storage failure.
			s.WorkerErrors += owned
			c.st.LastError = fmt.Sprintf("round %d on %s: %v", r.summary.Round, sh.worker, err)
			c.eachOwnedRow(sh, func(row *ShardRow) { row.Status, row.Error = ShardWorkerError, err.Error() })
		}
		return
	}
	gone := wr != nil && wr.Status == WorkerGoneStatus
	if wr != nil && !gone {
		wr.Status, wr.Unreachable, wr.LastRound = WorkerLive, 0, res.Round
	}
	now := workflow.Now(ctx)
	for i, sr := range res.Shards {
		if i >= len(sh.in.Shards) {
			break
		}
		asked := sh.in.Shards[i]
		row := c.row(asked.Shard)
		if row == nil || row.Owner.WorkerID != sh.worker || row.Owner.Epoch != asked.Epoch || sr.Shard != asked.Shard {
			s.Moved++ // the owner changed while the round ran: a late answer
			continue
		}
		row.Local += int64(sr.Local)
		s.Local += sr.Local
		c.st.LocalCheckpoints += int64(sr.Local)
		// A gone worker's shards wait for their next owner (who takes
		// them over from a dead one), whatever its last share did.
		status, why := row.Status, row.Error
		switch sr.Status {
		case activities.ShardOK:
			s.OK++
			s.Bytes += sr.Bytes
			s.ArchivedRows += sr.ArchivedRows
			s.ArchivedBytes += sr.ArchivedBytes
			row.Status, row.Error, row.Round, row.At = ShardOK, "", r.summary.Round, now
			row.CheckpointID, row.Cursor, row.Bytes, row.Duration = sr.CheckpointID, sr.Cursor, sr.Bytes, sr.Duration
		case activities.ShardNotOwner:
			s.NotOwner++
			row.Status, row.Error = ShardNotOwner, sr.Error
		default:
			s.Failed++
			row.Status, row.Error = ShardFailed, sr.Error
			c.st.LastError = fmt.Sprintf("round %d, shard %s: %s", r.summary.Round, sr.Shard, sr.Error)
			if sr.CheckpointID > row.CheckpointID {
				row.CheckpointID = sr.CheckpointID
			}
		}
		if gone {
			row.Status, row.Error = status, why
		}
	}
}

func (c *coordinator) eachOwnedRow(sh *share, fn func(*ShardRow)) {
	for _, se := range sh.in.Shards {
		if row := c.row(se.Shard); row != nil && row.Owner.WorkerID == sh.worker && row.Owner.Epoch == se.Epoch {
			fn(row)
		}
	}
}

// endRound closes the books of a round: counters, breaker, details.
func (c *coordinator) endRound(ctx workflow.Context, r *roundRun) {
	s := &r.summary
	s.Duration = activities.Duration(workflow.Now(ctx).Sub(s.StartedAt))
	switch {
	case s.Failed > 0:
		c.st.Failed++
		c.st.ConsecutiveFailures++
		if c.st.Breaker == BreakerHalfOpen || c.st.ConsecutiveFailures >= c.in.BreakerThreshold {
			c.st.Breaker = BreakerOpen
			c.st.BreakerOpenedAt = workflow.Now(ctx)
			c.notice(ctx)
		}
	case s.OK > 0:
		if s.OK == s.Shards {
			c.st.Complete++
		} else {
			c.st.Partial++
		}
		c.st.ConsecutiveFailures = 0
		c.st.Breaker = BreakerClosed
		c.st.LastError = ""
	case s.Shards > 0:
		c.st.Partial++
	}
	s.Breaker = c.st.Breaker
	c.upsertSearch(ctx, false)
	if s.Shards > 0 {
		sum := *s
		c.st.Last = &sum
	}
	c.finished = s.Round
	if w := c.waitedFor(s.Round); w != nil {
		*w = *s
	}
	c.waited = slices.DeleteFunc(c.waited, func(w RoundSummary) bool { return w.Round+16 < s.Round })
	c.showDetails(ctx)
}

// waitedFor returns the summary slot of a round a checkpoint-now caller
// waits for, or nil.
func (c *coordinator) waitedFor(round uint64) *RoundSummary {
	for i := range c.waited {
		if c.waited[i].Round == round {
			return &c.waited[i]
		}
	}
	return nil
}

// notice tells every live worker that the breaker opened (no rounds until
// the cool-down ends), so its metrics show it and it takes no local
// checkpoints meanwhile. Best effort: rounds do not wait for it, only a
// continue-as-new does (see continueAsNew).
func (c *coordinator) notice(ctx workflow.Context) {
	var a *activities.Rounds
	n := activities.CoordinatorNotice{Pipeline: c.in.Pipeline, Breaker: c.st.Breaker, Round: c.st.Round, Until: c.coolDownEnd()}
	for _, wr := range c.st.Workers {
		if wr.Status != WorkerLive || wr.Shards == 0 {
			continue
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:              wr.TaskQueue,
			ScheduleToStartTimeout: c.in.ReachTimeout.D(),
			StartToCloseTimeout:    10 * time.Second,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
			Summary:                fmt.Sprintf("breaker %s until %s", c.st.Breaker, n.Until.Format(time.RFC3339)),
		})
		f := workflow.ExecuteActivity(actx, a.Notice, n)
		c.notices++
		workflow.Go(ctx, func(ctx workflow.Context) {
			_ = f.Get(ctx, nil)
			c.notices--
		})
	}
}

func (c *coordinator) shouldContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	// A new current version of the control workers (a rollout): move to it
	// at the next round boundary instead of pinning the old one for a run.
	return c.roundsThisRun >= c.in.ContinueAsNewAfter || info.GetContinueAsNewSuggested() ||
		info.GetCurrentHistoryLength() >= continueAsNewEvents || info.GetTargetWorkerDeploymentVersionChanged()
}

// continueAsNew drains what could be lost — started handoffs, breaker
// notices, buffered signals, running handlers — and continues with the state, upgrading to
// the current worker version (Worker Versioning: the coordinator is pinned
// within a run). ended is false when a checkpoint-now request came while
// it drained: that request's handler waits for the next round, so the
// caller runs it and continues as new at a later boundary (histories
// before the serve-round-before-continue-as-new version waited for the
// handlers regardless, and stalled there until stopped).
func (c *coordinator) continueAsNew(ctx workflow.Context, stopCh, goneCh workflow.ReceiveChannel) (st CoordinatorState, ended bool, err error) {
	serve := workflow.GetVersion(ctx, "serve-round-before-continue-as-new", workflow.DefaultVersion, 1) >= 1
	// The notices of a breaker that opened in the run's last round go
	// with the run if it closes first: the server never starts an
	// activity of a closed run, and the workers would not know rounds
	// pause (histories before the version continued at once).
	notices := workflow.GetVersion(ctx, "deliver-notices-before-continue-as-new", workflow.DefaultVersion, 1) >= 1
	if err := workflow.Await(ctx, func() bool { return c.pendingStarts == 0 && (!notices || c.notices == 0) }); err != nil {
		return c.st, true, err
	}
	for {
		var g WorkerGone
		var req StopRequest
		switch {
		case goneCh.ReceiveAsync(&g):
			c.workerGone(ctx, g)
			continue
		case stopCh.ReceiveAsync(&req):
			c.stop(ctx, req)
			continue
		}
		break
	}
	if err := workflow.Await(ctx, func() bool {
		return workflow.AllHandlersFinished(ctx) || serve && !c.stopping && c.wantRound > c.st.Round
	}); err != nil {
		return c.st, true, err
	}
	if c.stopping {
		st, err := c.finish(ctx)
		return st, true, err
	}
	if c.wantRound > c.st.Round && serve {
		return c.st, false, nil
	}
	// The next run does not follow the handoffs still running: their
	// rows would read "started" until the shard moves again.
	for _, r := range c.running {
		c.noteHandoff(r.shard, r.to, "still running at the coordinator's continue-as-new; its result is in workflow "+r.id)
	}
	next := c.in
	st = c.st.folded(c.handoffRunning())
	next.State = &st
	return c.st, true, workflow.NewContinueAsNewErrorWithOptions(ctx, workflow.ContinueAsNewErrorOptions{
		InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade,
	}, CoordinatorWorkflow, next)
}

// finish ends the workflow after a stop, once its handlers are done.
func (c *coordinator) finish(ctx workflow.Context) (CoordinatorState, error) {
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && c.pendingStarts == 0 })
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("stopped (%s) after round %d", c.stopReason, c.st.Round))
	return c.st.folded(c.handoffRunning()), nil
}

// handoffRunning says whether a handoff started in this run for shard is
// still running.
func (c *coordinator) handoffRunning() func(streaming.ShardID) bool {
	set := make(map[streaming.ShardID]bool, len(c.running))
	for _, r := range c.running {
		set[r.shard] = true
	}
	return func(shard streaming.ShardID) bool { return set[shard] }
}

// showDetails tells the web UI where the coordinator is.
func (c *coordinator) showDetails(ctx workflow.Context) {
	var b strings.Builder
	switch {
	case c.inFlight != nil:
		s := c.inFlight.summary
		b.WriteString(fmt.Sprintf("round %d in flight: %d workers, %d shards (%s)", s.Round, s.Workers, s.Shards, s.Reason))
	case c.st.Last != nil:
		b.WriteString(c.st.Last.String())
	default:
		b.WriteString(fmt.Sprintf("no round yet: %d workers, %d shards announced", len(c.st.Workers), len(c.st.Shards)))
	}
	if c.st.Breaker != BreakerClosed {
		b.WriteString(fmt.Sprintf("\nbreaker %s after %d failed rounds", c.st.Breaker, c.st.ConsecutiveFailures))
		if c.st.Breaker == BreakerOpen {
			b.WriteString(fmt.Sprintf(", rounds resume at %s", c.coolDownEnd().UTC().Format(time.RFC3339)))
		}
	}
	if c.st.LastError != "" {
		b.WriteString(fmt.Sprintf("\nlast error: %s", c.st.LastError))
	}
	gone, unreachable := 0, 0
	for _, wr := range c.st.Workers {
		switch wr.Status {
		case WorkerGoneStatus:
			gone++
		case WorkerUnreachable:
			unreachable++
		}
	}
	if gone+unreachable > 0 {
		b.WriteString(fmt.Sprintf("\nworkers: %d gone, %d unreachable", gone, unreachable))
	}
	workflow.SetCurrentDetails(ctx, b.String())
}

// upsertSearch upserts the search attributes that changed: the pipeline
// once, the breaker state when it changes.
func (c *coordinator) upsertSearch(ctx workflow.Context, first bool) {
	var ups []temporal.SearchAttributeUpdate
	if first {
		ups = append(ups, SearchPipeline.ValueSet(c.in.Pipeline))
	}
	if c.st.SearchBreaker != c.st.Breaker {
		ups = append(ups, SearchBreakerState.ValueSet(c.st.Breaker))
		c.st.SearchBreaker = c.st.Breaker
	}
	if len(ups) == 0 {
		return
	}
	// Failing to upsert only degrades visibility.
	if err := workflow.UpsertTypedSearchAttributes(ctx, ups...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// row returns the table row of shard, or nil.
func (c *coordinator) row(shard streaming.ShardID) *ShardRow {
	i, ok := shardIndex(c.st.Shards, shard)
	if !ok {
		return nil
	}
	return &c.st.Shards[i]
}

func (c *coordinator) addRow(shard streaming.ShardID) *ShardRow {
	i, _ := shardIndex(c.st.Shards, shard)
	c.st.Shards = slices.Insert(c.st.Shards, i, ShardRow{Shard: shard, Status: ShardNew})
	return &c.st.Shards[i]
}

func (c *coordinator) findWorker(id string) *WorkerRow {
	i, ok := slices.BinarySearchFunc(c.st.Workers, id, func(w WorkerRow, s string) int { return strings.Compare(w.WorkerID, s) })
	if !ok {
		return nil
	}
	return &c.st.Workers[i]
}

// worker returns the worker's row, adding it (or updating its queue).
func (c *coordinator) worker(id, queue string) *WorkerRow {
	if wr := c.findWorker(id); wr != nil {
		wr.TaskQueue = queue
		return wr
	}
	i, _ := slices.BinarySearchFunc(c.st.Workers, id, func(w WorkerRow, s string) int { return strings.Compare(w.WorkerID, s) })
	c.st.Workers = slices.Insert(c.st.Workers, i, WorkerRow{WorkerID: id, TaskQueue: queue, Status: WorkerLive})
	return &c.st.Workers[i]
}

// countShards refreshes each worker's shard count.
func (c *coordinator) countShards() {
	for i := range c.st.Workers {
		c.st.Workers[i].Shards = 0
	}
	for _, row := range c.st.Shards {
		if row.Status == ShardOwnerGone || row.Status == ShardReleased {
			continue
		}
		if wr := c.findWorker(row.Owner.WorkerID); wr != nil {
			wr.Shards++
		}
	}
}
