package pipeline

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
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

// workflowControl is the control plane on the pipeline's checkpoint
// coordinator (workflows.CoordinatorWorkflow): the worker announces the
// shards it gains, and the ones it releases, in batches
// (workflows.Announce: update-with-start, whose validator refuses a stale
// epoch and whose answer names each moved shard's previous owner and the
// handoff the coordinator started); the coordinator's rounds reach the
// worker as activities on its own queue (activities.Rounds over the host's
// activities.Shards). While rounds stop coming for max_checkpoint_age
// (Temporal unreachable, the coordinator stopped, this worker declared
// gone) the worker checkpoints on its own (activities.Shards.RunLocal) and
// announces every held shard again, which brings it back into the rounds;
// the next round reports the local checkpoints to the coordinator. An
// open breaker's cool-down (activities.CoordinatorNotice, or an
// announcement's answer) is not such a pause: the worker announces its
// held shards again only once it ended.
type workflowControl struct {
	w  *Worker
	tc client.Client

	kick chan struct{} // something to announce

	mu          sync.Mutex
	pending     map[streaming.ShardID]*shard // gained, not announced yet
	sent        map[streaming.ShardID]*shard // announced (or being announced) at least once
	released    map[streaming.ShardID]streaming.Epoch
	coordinator string // the coordinator's first run id, as last announced to
}

func newWorkflowControl(w *Worker, tc client.Client) *workflowControl {
	return &workflowControl{w: w, tc: tc, kick: make(chan struct{}, 1),
		pending: map[streaming.ShardID]*shard{}, sent: map[streaming.ShardID]*shard{}, released: map[streaming.ShardID]streaming.Epoch{}}
}

func (c *workflowControl) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *workflowControl) gained(s *shard) {
	c.mu.Lock()
	c.pending[s.id] = s
	delete(c.released, s.id)
	c.mu.Unlock()
	c.wake()
}

func (c *workflowControl) lost(s *shard) {
	c.mu.Lock()
	if c.pending[s.id] == s {
		delete(c.pending, s.id)
	}
	// Pending again (announced again, or its announcement in flight)
	// does not mean never announced: only a shard never sent has
	// nothing to withdraw.
	if c.sent[s.id] == s {
		delete(c.sent, s.id)
		c.released[s.id] = s.epoch
	}
	c.mu.Unlock()
	c.wake()
}

// coordinatorInput is what starts the pipeline's coordinator when no one
// runs (a running coordinator keeps its own settings).
func (c *workflowControl) coordinatorInput() workflows.CoordinatorInput {
	pol := c.w.c.p.Checkpoint
	return workflows.CoordinatorInput{
		Pipeline: c.w.c.p.Name, Interval: activities.Duration(pol.Interval), Manual: pol.Disabled,
		BreakerThreshold: pol.BreakerThreshold, BreakerCoolDown: activities.Duration(pol.BreakerCoolDown),
		MaxCheckpointAge: activities.Duration(pol.MaxCheckpointAge), HandoffStepTimeout: activities.Duration(pol.HandoffStepTimeout),
	}
}

// maxAge is how long the worker goes without a round before it
// checkpoints on its own: the coordinator's setting once a round told it,
// the pipeline's until then.
func (c *workflowControl) maxAge() time.Duration {
	if v := c.w.host.shards.Coordinator(c.w.c.p.Name); v.MaxCheckpointAge > 0 {
		return v.MaxCheckpointAge
	}
	return c.w.c.p.Checkpoint.MaxCheckpointAge
}

func (c *workflowControl) run(ctx context.Context) {
	pol := c.w.c.p.Checkpoint
	var bg sync.WaitGroup
	defer bg.Wait()
	defer c.announceReleased()
	if !pol.Disabled {
		bg.Go(func() { _ = c.w.host.shards.RunLocal(ctx, c.w.c.p.Name, pol.MaxCheckpointAge) })
	}
	t := time.NewTicker(max(min(pol.Interval, time.Second), 50*time.Millisecond))
	defer t.Stop()
	lastRound, lastSeen := uint64(0), time.Now()
	var retryAt time.Time
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		}
		now := time.Now()
		v := c.w.host.shards.Coordinator(c.w.c.p.Name)
		if v.Round != lastRound {
			lastRound, lastSeen = v.Round, now
		}
		if !pol.Disabled && now.Sub(lastSeen) >= c.maxAge() && !now.Before(v.PausedUntil) {
			// No round for max_checkpoint_age: the local checkpoints
			// keep the shards safe; announcing every held shard again
			// brings them back into the rounds (idempotent for a
			// coordinator that knows them; starts one that was stopped;
			// revives a worker its lease declared gone). An open
			// breaker's cool-down is no outage: the rounds stopped on
			// purpose, and announcing would only write the coordinator's
			// history; the shards are announced again when it ends if no
			// round came by then. Gained and released shards are
			// announced at once regardless.
			lastSeen = now
			c.reannounce()
		}
		if now.Before(retryAt) {
			continue
		}
		switch err := c.announce(ctx); {
		case err == nil:
			backoff = 100 * time.Millisecond
			retryAt = time.Time{}
		case ctx.Err() != nil:
			return
		default:
			c.w.log.Warn("announcing shard owners failed; will retry", "err", err, "in", backoff)
			retryAt = now.Add(backoff)
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// releasedAnnounceTimeout bounds the announcement of the shards a
// stopping worker released (announceReleased), so an unreachable Temporal
// delays the stop by that much at most.
const releasedAnnounceTimeout = 5 * time.Second

// announceReleased announces, once run's context ended (the source has
// stopped: every shard's final checkpoint ran), the shards released since
// the last announcement: a stopping worker's final revokes. Cut off with
// run, they stayed this worker's in the coordinator's table (its rounds
// kept checkpointing them on a queue no one polls any more) until another
// worker announced them.
func (c *workflowControl) announceReleased() {
	ctx, cancel := context.WithTimeout(context.Background(), releasedAnnounceTimeout)
	defer cancel()
	if err := c.announce(ctx); err != nil {
		c.w.log.Warn("announcing the released shards failed; the coordinator learns of them from their next owners", "err", err)
	}
}

// reannounce marks every held shard to be announced again.
func (c *workflowControl) reannounce() {
	held := c.w.host.heldShards()
	c.mu.Lock()
	for _, s := range held {
		c.pending[s.id] = s
	}
	c.mu.Unlock()
}

// announce sends what is pending in one announcement. A stale epoch
// refuses the whole announcement: the stale shards it names (lost
// meanwhile) are dropped and the rest announced again in one
// announcement; when that is refused too, or the coordinator named none,
// each shard is announced on its own and the stale ones are dropped.
func (c *workflowControl) announce(ctx context.Context) error {
	c.mu.Lock()
	var shards []*shard
	for id, s := range c.pending {
		if !c.w.host.holds(s) {
			delete(c.pending, id)
			continue
		}
		c.sent[id] = s
		shards = append(shards, s)
	}
	var released []activities.ShardEpoch
	for id, e := range c.released {
		released = append(released, activities.ShardEpoch{Shard: id, Epoch: e})
	}
	c.mu.Unlock()
	if len(shards)+len(released) == 0 {
		return nil
	}
	err := c.send(ctx, shards, released)
	var se *workflows.StaleAnnouncementError
	if errors.As(err, &se) && len(se.Shards) > 0 {
		// Announcing each shard on its own would write an update per
		// shard into the coordinator's history (a rebalance's hundreds).
		var rest []*shard
		for _, s := range shards {
			if slices.Contains(se.Shards, activities.ShardEpoch{Shard: s.id, Epoch: s.epoch}) {
				c.dropStale(s, err)
				continue
			}
			rest = append(rest, s)
		}
		if len(rest) < len(shards) {
			shards = rest
			if len(shards)+len(released) == 0 {
				return nil
			}
			err = c.send(ctx, shards, released)
		}
	}
	if !errors.Is(err, workflows.ErrStaleAnnouncement) {
		return err
	}
	if len(shards) == 1 && len(released) == 0 {
		c.dropStale(shards[0], err)
		return nil
	}
	var errs []error
	for _, s := range shards {
		switch err := c.send(ctx, []*shard{s}, nil); {
		case errors.Is(err, workflows.ErrStaleAnnouncement):
			c.dropStale(s, err)
		case err != nil:
			errs = append(errs, err)
		}
	}
	if len(released) > 0 {
		errs = append(errs, c.send(ctx, nil, released))
	}
	return errors.Join(errs...)
}

// dropStale gives up announcing s: the coordinator knows a newer owner,
// so this worker has lost it (the source tells it soon).
func (c *workflowControl) dropStale(s *shard, err error) {
	c.mu.Lock()
	if c.pending[s.id] == s {
		delete(c.pending, s.id)
	}
	c.mu.Unlock()
	c.w.log.Info("shard announcement is stale: a newer owner holds it", "shard", s.id, "epoch", uint64(s.epoch), "err", err)
}

// send announces shards and released to the coordinator and books what
// landed.
func (c *workflowControl) send(ctx context.Context, shards []*shard, released []activities.ShardEpoch) error {
	a := workflows.Announcement{WorkerID: c.w.o.workerID, TaskQueue: c.w.TaskQueue(), Released: released, Instance: c.w.instance}
	for _, s := range shards {
		a.Shards = append(a.Shards, activities.ShardEpoch{Shard: s.id, Epoch: s.epoch})
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := workflows.Announce(actx, c.tc, c.coordinatorInput(), a)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for _, s := range shards {
		if c.pending[s.id] == s {
			delete(c.pending, s.id)
		}
	}
	for _, r := range released {
		if e, ok := c.released[r.Shard]; ok && e == r.Epoch {
			delete(c.released, r.Shard)
		}
	}
	restarted := c.coordinator != "" && res.Coordinator != c.coordinator
	c.coordinator = res.Coordinator
	c.mu.Unlock()
	if v := c.w.host.shards.Coordinator(c.w.c.p.Name); res.Breaker == workflows.BreakerOpen &&
		res.BreakerUntil.After(time.Now()) && res.BreakerUntil.After(v.PausedUntil) {
		// The breaker's notice went to the workers that held shards when
		// it opened; the answer tells this one too.
		_ = c.w.host.shards.Notice(ctx, activities.CoordinatorNotice{Pipeline: c.w.c.p.Name, Breaker: res.Breaker, Until: res.BreakerUntil, Round: res.Round})
	}
	if restarted {
		// A coordinator started afresh knows none of our other shards.
		c.w.log.Info("the checkpoint coordinator was restarted; announcing every held shard again", "coordinator", res.Coordinator)
		c.reannounce()
		c.wake()
	}
	for _, p := range res.Previous {
		c.w.log.Info("shard moved here", "shard", p.Shard, "previous_owner", p.Owner.WorkerID, "previous_epoch", uint64(p.Owner.Epoch),
			"previous_gone", p.Gone, "handoff", p.Handoff)
	}
	c.w.log.Info("shard owners announced", "shards", len(a.Shards), "released", len(released), "round", res.Round, "breaker", res.Breaker)
	return nil
}
