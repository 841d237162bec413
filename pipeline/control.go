package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/workflows"
)

// localControl checkpoints every held shard each interval in process:
// the control plane without Temporal.
type localControl struct{ w *Worker }

func (localControl) gained(*shard) {}
func (localControl) lost(*shard)   {}

func (c localControl) run(ctx context.Context) {
	if pol := c.w.c.p.Checkpoint; !pol.Disabled {
		c.w.checkpointEvery(ctx, pol.Interval, nil)
	}
}

// checkpointEvery checkpoints shards (nil: every held shard), in
// parallel, each interval until ctx ends.
func (w *Worker) checkpointEvery(ctx context.Context, every time.Duration, shards []*shard) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ss := shards
		if ss == nil {
			ss = w.host.heldShards()
		}
		var wg sync.WaitGroup
		for _, s := range ss {
			wg.Go(func() {
				_, err := s.cp.Checkpoint(ctx)
				switch {
				case err == nil || ctx.Err() != nil:
				case !w.host.holds(s):
					// Released meanwhile (its final checkpoint ran first).
					w.log.Debug("checkpoint of a released shard abandoned", "shard", s.id, "err", err)
				default:
					w.log.Warn("checkpoint failed", "shard", s.id, "err", err)
				}
			})
		}
		wg.Wait()
	}
}

// workflowControl is the control plane on Temporal with one checkpoint
// workflow and one handoff workflow per shard: when the worker gains a
// shard it announces itself as the owner to both (signal-with-start of
// workflows.SignalOwner with its task queue and epoch), retrying until
// the announcement lands or the shard is lost; and now and then it
// answers handoffs that wait for the owner of a shard it holds.
type workflowControl struct {
	w  *Worker
	tc client.Client

	ctx        context.Context // the announcements' lifetime (set by run)
	ready      chan struct{}
	announcers sync.WaitGroup

	mu        sync.Mutex
	announced map[*shard]bool
}

func newWorkflowControl(w *Worker, tc client.Client) *workflowControl {
	return &workflowControl{w: w, tc: tc, ready: make(chan struct{}), announced: map[*shard]bool{}}
}

func (c *workflowControl) gained(s *shard) {
	c.announcers.Go(func() {
		<-c.ready
		c.announceUntilDone(s)
	})
}

func (c *workflowControl) lost(s *shard) {
	c.mu.Lock()
	delete(c.announced, s)
	c.mu.Unlock()
}

func (c *workflowControl) run(ctx context.Context) {
	c.ctx = ctx
	close(c.ready)
	defer c.announcers.Wait()
	every := max(c.w.c.p.Checkpoint.HeartbeatTimeout/2, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.reconcileHandoffs(ctx)
		}
	}
}

// announceUntilDone announces s, retrying with backoff, until it landed,
// the shard was lost (a stale epoch is never offered to a waiting
// handoff) or the worker stops.
func (c *workflowControl) announceUntilDone(s *shard) {
	ctx := c.ctx
	for backoff := 100 * time.Millisecond; ctx.Err() == nil && c.w.host.holds(s); backoff = min(2*backoff, 10*time.Second) {
		err := c.announce(ctx, s)
		if err == nil {
			c.mu.Lock()
			c.announced[s] = true
			c.mu.Unlock()
			return
		}
		c.w.log.Warn("announcing shard owner failed; will retry", "shard", s.id, "epoch", uint64(s.epoch), "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

func (c *workflowControl) owner(s *shard) workflows.Owner {
	return workflows.Owner{WorkerID: c.w.o.workerID, TaskQueue: c.w.TaskQueue(), Epoch: s.epoch}
}

// announce tells the shard's checkpoint workflow (signal-with-start) and
// its handoff workflow who owns the shard now. The previous owner, if
// the checkpoint workflow knows one, becomes the handoff's From so its
// final checkpoint is verified.
func (c *workflowControl) announce(ctx context.Context, s *shard) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, pol := c.w.c.p.Name, c.w.c.p.Checkpoint
	owner := c.owner(s)
	cpID := workflows.CheckpointWorkflowID(p, s.id)
	prev := c.previousOwner(ctx, cpID, owner)
	if !pol.Disabled {
		in := workflows.CheckpointInput{
			Pipeline: p, Shard: s.id, Interval: pol.Interval,
			BreakerThreshold: pol.BreakerThreshold, BreakerCoolDown: pol.BreakerCoolDown,
			SnapshotTimeout: pol.StageTimeout, SaveTimeout: pol.StageTimeout, CommitTimeout: pol.StageTimeout,
		}
		opts := client.StartWorkflowOptions{ID: cpID, TaskQueue: workflows.ControlTaskQueue}
		if _, err := c.tc.SignalWithStartWorkflow(ctx, cpID, workflows.SignalOwner, owner, opts, workflows.CheckpointWorkflow, in); err != nil {
			return fmt.Errorf("signal-with-start %s: %w", cpID, err)
		}
	}
	hoID := workflows.HandoffWorkflowID(p, s.id)
	if stale := c.terminateStale(ctx, hoID, s); stale != nil && prev == nil && stale.TaskQueue != owner.TaskQueue {
		prev = stale
	}
	in := workflows.HandoffInput{Pipeline: p, Shard: s.id, From: prev, StepTimeout: pol.HandoffStepTimeout}
	opts := client.StartWorkflowOptions{ID: hoID, TaskQueue: workflows.ControlTaskQueue}
	if _, err := c.tc.SignalWithStartWorkflow(ctx, hoID, workflows.SignalOwner, owner, opts, workflows.HandoffWorkflow, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", hoID, err)
	}
	prevName := ""
	if prev != nil {
		prevName = prev.WorkerID
	}
	c.w.log.Info("shard owner announced", "shard", s.id, "epoch", uint64(s.epoch), "previous_owner", prevName)
	return nil
}

// reconcileHandoffs answers handoffs that wait for the owner of a shard
// this worker already holds. The lease workflow of a dead worker starts
// handoffs for the shards of its last heartbeat, which may be older than
// the last rebalance: a shard it lists may have moved to this worker
// before it died, and this worker announced itself then, to an earlier
// handoff. The data plane has decided; tell the waiting saga.
func (c *workflowControl) reconcileHandoffs(ctx context.Context) {
	for _, s := range c.w.host.heldShards() {
		c.mu.Lock()
		done := c.announced[s]
		c.mu.Unlock()
		if !done || ctx.Err() != nil {
			continue
		}
		id := workflows.HandoffWorkflowID(c.w.c.p.Name, s.id)
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		desc, err := c.tc.DescribeWorkflow(rctx, id, "")
		if err != nil || desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			cancel()
			continue
		}
		st, err := c.handoffState(rctx, id)
		switch {
		case err != nil:
		case st.Step == workflows.StepAwaitOwner:
			err = c.tc.SignalWorkflow(rctx, id, "", workflows.SignalOwner, c.owner(s))
			c.w.log.Info("answered a handoff waiting for the owner of a held shard", "shard", s.id, "epoch", uint64(s.epoch), "err", err)
		case st.To != nil && st.To.Epoch < s.epoch:
			// A saga towards an owner the group has since replaced:
			// announce again, which supersedes it.
			c.mu.Lock()
			delete(c.announced, s)
			c.mu.Unlock()
			c.announcers.Go(func() { c.announceUntilDone(s) })
		}
		cancel()
	}
}

func (c *workflowControl) handoffState(ctx context.Context, id string) (workflows.HandoffState, error) {
	var st workflows.HandoffState
	v, err := c.tc.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// terminateStale ends a running handoff of s whose new owner is at an
// older epoch than ours: the group has given the shard to us since, so
// that saga can only wait for a dead or former owner (its steps on the
// owner's queue have no schedule-to-start deadline). It returns that
// saga's target, which was the shard's owner before us.
func (c *workflowControl) terminateStale(ctx context.Context, id string, s *shard) *workflows.Owner {
	desc, err := c.tc.DescribeWorkflow(ctx, id, "")
	if err != nil || desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil
	}
	st, err := c.handoffState(ctx, id)
	if err != nil || st.To == nil || st.To.Epoch >= s.epoch {
		return nil
	}
	reason := fmt.Sprintf("superseded: worker %q owns the shard at epoch %d, above the saga's target %q at epoch %d",
		c.w.o.workerID, uint64(s.epoch), st.To.WorkerID, uint64(st.To.Epoch))
	if err := c.tc.TerminateWorkflow(ctx, id, "", reason); err != nil {
		c.w.log.Warn("terminating a stale handoff failed", "workflow", id, "err", err)
		return nil
	}
	c.w.log.Info("terminated a stale handoff", "workflow", id, "reason", reason)
	to := *st.To
	return &to
}

// previousOwner asks the shard's checkpoint workflow whom it knows as the
// owner, or as the one before when that is us or was cleared (the old
// owner answered NotOwner after its revoke); nil when it does not run or
// knows no other owner below our epoch.
func (c *workflowControl) previousOwner(ctx context.Context, id string, me workflows.Owner) *workflows.Owner {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	v, err := c.tc.QueryWorkflow(qctx, id, "", workflows.QueryStatus)
	if err != nil {
		return nil
	}
	var st workflows.CheckpointState
	if err := v.Get(&st); err != nil {
		return nil
	}
	o := st.Owner
	if o == nil || o.TaskQueue == me.TaskQueue {
		o = st.Previous
	}
	if o == nil || o.TaskQueue == me.TaskQueue || o.Epoch >= me.Epoch {
		return nil
	}
	prev := *o
	return &prev
}
