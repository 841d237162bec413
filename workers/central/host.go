package central

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// Host is the central worker's activities.ShardHost. It follows the Kafka
// Source's router (a watch loop, every few tens of milliseconds): when the
// member gains a partition it registers the partition's Checkpointer in
// the activities.Shards registry and announces itself to the shard's
// checkpoint and handoff workflows; when it loses one it unregisters it
// and keeps its last checkpoint for the handoff's final-checkpoint step.
//
// Safe for concurrent use.
type Host struct {
	pipeline  string
	workerID  string
	taskQueue string
	src       *kafka.Source
	shards    *activities.Shards
	tc        client.Client // nil without Temporal
	cfg       Config
	log       *slog.Logger
	m         *metrics

	announcers sync.WaitGroup // announcement goroutines (see sync)

	mu         sync.Mutex
	held       map[streaming.ShardID]*heldShard
	released   map[streaming.ShardID]*heldShard // last loss of each shard
	nCompleted int                              // checkpoints completed while held
}

type heldShard struct {
	shard      streaming.ShardID
	part       kafka.Partition
	epoch      streaming.Epoch
	cp         *streaming.Checkpointer
	restored   activities.RestoreSummary
	announced  bool
	announcing bool      // an announcement goroutine runs
	lastAt     time.Time // completion time of the last checkpoint counted in metrics
}

var _ activities.ShardHost = (*Host)(nil)

func newHost(cfg Config, src *kafka.Source, shards *activities.Shards, tc client.Client, log *slog.Logger, m *metrics) *Host {
	return &Host{
		pipeline: cfg.Pipeline, workerID: cfg.WorkerID, taskQueue: workflows.WorkerTaskQueue(cfg.WorkerID),
		src: src, shards: shards, tc: tc, cfg: cfg, log: log, m: m,
		held: map[streaming.ShardID]*heldShard{}, released: map[streaming.ShardID]*heldShard{},
	}
}

// ShardName is the shard name of a Kafka partition in workflow ids and
// activity inputs: "topic/partition".
func ShardName(p kafka.Partition) streaming.ShardID {
	return streaming.KafkaShard(p.Topic, p.Partition)
}

// parseShard is the inverse of ShardName.
func parseShard(shard streaming.ShardID) (kafka.Partition, error) {
	t, p, err := shard.KafkaPartition()
	return kafka.Partition{Topic: t, Partition: p}, err
}

func (h *Host) notOwner(shard streaming.ShardID, epoch streaming.Epoch, why string) error {
	return fmt.Errorf("worker %q, shard %s/%s at epoch %d: %s: %w", h.workerID, h.pipeline, shard, uint64(epoch), why, ErrNotHeld)
}

// run watches the router until ctx ends, and now and then offers the
// shards it holds to handoffs that wait for an owner.
func (h *Host) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	rt := time.NewTicker(max(h.cfg.Checkpoint.HeartbeatTimeout.D()/2, time.Second))
	defer rt.Stop()
	defer h.announcers.Wait()
	for {
		h.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rt.C:
			h.reconcileHandoffs(ctx)
		}
	}
}

// reconcileHandoffs answers handoffs that wait for the owner of a shard
// this worker already holds. The lease workflow of a dead worker starts
// handoffs for the shards of its last heartbeat, which may be older than
// the last rebalance: a shard it lists may have moved to this worker
// before it died, and this worker announced itself then, to an earlier
// handoff. The data plane has decided; tell the waiting saga.
func (h *Host) reconcileHandoffs(ctx context.Context) {
	if h.tc == nil {
		return
	}
	h.mu.Lock()
	var hs []*heldShard
	for _, s := range h.held {
		if s.announced {
			hs = append(hs, s)
		}
	}
	h.mu.Unlock()
	for _, s := range hs {
		if ctx.Err() != nil {
			return
		}
		id := workflows.HandoffWorkflowID(h.pipeline, s.shard)
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		desc, err := h.tc.DescribeWorkflow(rctx, id, "")
		if err != nil || desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			cancel()
			continue
		}
		st, err := h.handoffState(rctx, id)
		switch {
		case err != nil:
		case st.Step == workflows.StepAwaitOwner:
			owner := workflows.Owner{WorkerID: h.workerID, TaskQueue: h.taskQueue, Epoch: s.epoch}
			err = h.tc.SignalWorkflow(rctx, id, "", workflows.SignalOwner, owner)
			h.log.Info("answered a handoff waiting for the owner of a held shard", "shard", s.shard, "epoch", uint64(s.epoch), "err", err)
		case st.To != nil && st.To.Epoch < s.epoch:
			// A saga towards an owner the group has since replaced:
			// announce again, which supersedes it.
			h.mu.Lock()
			s.announced = false
			h.mu.Unlock()
		}
		cancel()
	}
}

// sync brings the registry in line with the router, announces new shards
// (retrying failed announcements) and updates the checkpoint metrics.
func (h *Host) sync(ctx context.Context) {
	owned := h.src.Router().Owned()
	var gained, toAnnounce []*heldShard
	h.mu.Lock()
	for shard, hs := range h.held {
		cp, e, ok := h.src.Checkpointer(hs.part)
		if ok && e == hs.epoch && cp == hs.cp {
			if since, still := owned[hs.part]; still && since == hs.epoch {
				continue
			}
		}
		delete(h.held, shard)
		h.released[shard] = hs
		h.shards.Unregister(h.pipeline, shard)
		h.m.breaker.DeleteLabelValues(string(shard))
		h.log.Info("shard released", "pipeline", h.pipeline, "shard", shard, "epoch", uint64(hs.epoch), "last_checkpoint", uint64(hs.cp.Status().LastID))
	}
	for p, e := range owned {
		shard := ShardName(p)
		if hs := h.held[shard]; hs != nil && hs.epoch == e {
			continue
		}
		cp, ce, ok := h.src.Checkpointer(p)
		if !ok || ce != e {
			continue // still restoring
		}
		st := cp.Status()
		hs := &heldShard{shard: shard, part: p, epoch: e, cp: cp, lastAt: st.LastCompletedAt,
			restored: activities.RestoreSummary{CheckpointID: uint64(st.LastID), Epoch: st.LastEpoch, Cursor: st.LastCursor, Bytes: st.StateBytes}}
		h.held[shard] = hs
		h.shards.Register(h.pipeline, shard, cp)
		gained = append(gained, hs)
	}
	for _, hs := range h.held {
		st := hs.cp.Status()
		h.m.breaker.WithLabelValues(string(hs.shard)).Set(breakerValue(st.Breaker))
		if !st.LastCompletedAt.IsZero() && st.LastCompletedAt != hs.lastAt {
			hs.lastAt = st.LastCompletedAt
			h.nCompleted++
			h.m.checkpoints.WithLabelValues(string(hs.shard)).Inc()
			h.m.checkpointDur.WithLabelValues(string(hs.shard)).Observe(st.LastDuration.Seconds())
		}
		if !hs.announced && !hs.announcing {
			hs.announcing = true
			toAnnounce = append(toAnnounce, hs)
		}
	}
	h.mu.Unlock()
	for _, hs := range gained {
		h.log.Info("shard gained", "pipeline", h.pipeline, "shard", hs.shard, "epoch", uint64(hs.epoch),
			"restored_checkpoint", hs.restored.CheckpointID, "cursor", hs.restored.Cursor)
	}
	if h.tc == nil {
		return
	}
	// Announcements are round trips to Temporal: one goroutine each, so a
	// slow server never delays noticing a lost shard.
	for _, hs := range toAnnounce {
		h.announcers.Go(func() {
			err := ctx.Err()
			// Skip a shard lost meanwhile, so a stale epoch is never
			// offered to a waiting handoff.
			if _, e, ok := h.src.Checkpointer(hs.part); err == nil && ok && e == hs.epoch {
				if err = h.announce(ctx, hs); err != nil {
					h.log.Warn("announcing shard owner failed; will retry", "shard", hs.shard, "epoch", uint64(hs.epoch), "err", err)
				}
			}
			h.mu.Lock()
			hs.announcing = false
			hs.announced = hs.announced || err == nil
			h.mu.Unlock()
		})
	}
}

// announce tells the shard's checkpoint workflow (signal-with-start) and
// its handoff workflow who owns the shard now. The previous owner, if the
// checkpoint workflow knows one, becomes the handoff's From so its final
// checkpoint is verified.
func (h *Host) announce(ctx context.Context, hs *heldShard) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	owner := workflows.Owner{WorkerID: h.workerID, TaskQueue: h.taskQueue, Epoch: hs.epoch}
	cpID := workflows.CheckpointWorkflowID(h.pipeline, hs.shard)
	prev := h.previousOwner(ctx, cpID, owner)
	if !h.cfg.Checkpoint.Disabled {
		in := workflows.CheckpointInput{
			Pipeline: h.pipeline, Shard: hs.shard, Interval: h.cfg.Checkpoint.Interval.D(),
			BreakerThreshold: h.cfg.Checkpoint.BreakerThreshold, BreakerCoolDown: h.cfg.Checkpoint.BreakerCoolDown.D(),
			SnapshotTimeout: h.cfg.Checkpoint.StageTimeout.D(), SaveTimeout: h.cfg.Checkpoint.StageTimeout.D(), CommitTimeout: h.cfg.Checkpoint.StageTimeout.D(),
		}
		opts := client.StartWorkflowOptions{ID: cpID, TaskQueue: workflows.ControlTaskQueue}
		if _, err := h.tc.SignalWithStartWorkflow(ctx, cpID, workflows.SignalOwner, owner, opts, workflows.CheckpointWorkflow, in); err != nil {
			return fmt.Errorf("signal-with-start %s: %w", cpID, err)
		}
	}
	hoID := workflows.HandoffWorkflowID(h.pipeline, hs.shard)
	if stale := h.terminateStale(ctx, hoID, hs); stale != nil && prev == nil && stale.TaskQueue != h.taskQueue {
		prev = stale
	}
	in := workflows.HandoffInput{Pipeline: h.pipeline, Shard: hs.shard, From: prev, StepTimeout: h.cfg.Checkpoint.HandoffStepTimeout.D()}
	opts := client.StartWorkflowOptions{ID: hoID, TaskQueue: workflows.ControlTaskQueue}
	if _, err := h.tc.SignalWithStartWorkflow(ctx, hoID, workflows.SignalOwner, owner, opts, workflows.HandoffWorkflow, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", hoID, err)
	}
	h.log.Info("shard owner announced", "shard", hs.shard, "epoch", uint64(hs.epoch), "previous_owner", prevName(prev))
	return nil
}

func (h *Host) handoffState(ctx context.Context, id string) (workflows.HandoffState, error) {
	var st workflows.HandoffState
	v, err := h.tc.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// terminateStale ends a running handoff of hs's shard whose new owner is
// at an older epoch than ours: the group has given the shard to us since,
// so that saga can only wait for a dead or former owner (its steps on the
// owner's queue have no schedule-to-start deadline). It returns that
// saga's target, which was the shard's owner before us.
func (h *Host) terminateStale(ctx context.Context, id string, hs *heldShard) *workflows.Owner {
	desc, err := h.tc.DescribeWorkflow(ctx, id, "")
	if err != nil || desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil
	}
	st, err := h.handoffState(ctx, id)
	if err != nil || st.To == nil || st.To.Epoch >= hs.epoch {
		return nil
	}
	reason := fmt.Sprintf("superseded: worker %q owns the shard at epoch %d, above the saga's target %q at epoch %d",
		h.workerID, uint64(hs.epoch), st.To.WorkerID, st.To.Epoch)
	if err := h.tc.TerminateWorkflow(ctx, id, "", reason); err != nil {
		h.log.Warn("terminating a stale handoff failed", "workflow", id, "err", err)
		return nil
	}
	h.log.Info("terminated a stale handoff", "workflow", id, "reason", reason)
	to := *st.To
	return &to
}

func prevName(o *workflows.Owner) string {
	if o == nil {
		return ""
	}
	return o.WorkerID
}

// previousOwner asks the shard's checkpoint workflow whom it knows as the
// owner; nil when it does not run, knows none, or knows us.
func (h *Host) previousOwner(ctx context.Context, id string, me workflows.Owner) *workflows.Owner {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	v, err := h.tc.QueryWorkflow(qctx, id, "", workflows.QueryStatus)
	if err != nil {
		return nil
	}
	var st workflows.CheckpointState
	if err := v.Get(&st); err != nil || st.Owner == nil {
		return nil
	}
	if st.Owner.TaskQueue == me.TaskQueue || st.Owner.Epoch >= me.Epoch {
		return nil
	}
	o := *st.Owner
	return &o
}

func summary(st streaming.CheckpointStatus) activities.CheckpointSummary {
	return activities.CheckpointSummary{CheckpointID: uint64(st.LastID), Epoch: st.LastEpoch, Cursor: st.LastCursor, Bytes: st.LastBytes, Duration: st.LastDuration}
}

// FinalCheckpoint implements activities.ShardHost. A Kafka member cannot
// stop serving a partition on its own (the group assigns it), so when the
// shard is still held at epoch this takes a checkpoint now; when it was
// released (the revoke callback took the final checkpoint) it returns
// that checkpoint.
func (h *Host) FinalCheckpoint(ctx context.Context, pipeline string, shard streaming.ShardID, epoch streaming.Epoch) (activities.CheckpointSummary, error) {
	if pipeline != h.pipeline {
		return activities.CheckpointSummary{}, h.notOwner(shard, epoch, "serves pipeline "+h.pipeline+", not "+pipeline)
	}
	p, err := parseShard(shard)
	if err != nil {
		return activities.CheckpointSummary{}, err
	}
	if cp, e, ok := h.src.Checkpointer(p); ok && e == epoch {
		res, err := cp.Checkpoint(ctx)
		if err != nil {
			return activities.CheckpointSummary{}, err
		}
		return activities.CheckpointSummary{CheckpointID: uint64(res.ID), Epoch: res.Epoch, Cursor: cp.Status().LastCursor, Bytes: res.Bytes, Duration: res.Duration}, nil
	}
	h.mu.Lock()
	hs := h.released[shard]
	if cur := h.held[shard]; cur != nil && cur.epoch == epoch {
		hs = cur // released in the Source, not yet seen by the watch loop
	}
	h.mu.Unlock()
	if hs == nil || hs.epoch != epoch {
		return activities.CheckpointSummary{}, h.notOwner(shard, epoch, "never held it at this epoch")
	}
	return summary(hs.cp.Status()), nil
}

// Restore implements activities.ShardHost: the Source restored the
// partition from its newest durable checkpoint before consuming it; this
// reports that restore, and refuses when the partition is not owned at
// exactly epoch.
func (h *Host) Restore(_ context.Context, pipeline string, shard streaming.ShardID, epoch streaming.Epoch) (activities.RestoreSummary, error) {
	hs, err := h.current(pipeline, shard, epoch)
	if err != nil {
		return activities.RestoreSummary{}, err
	}
	return hs.restored, nil
}

// Resume implements activities.ShardHost: the Source consumes a
// partition right after restoring it, so this only checks that it is
// consuming it at epoch.
func (h *Host) Resume(_ context.Context, pipeline string, shard streaming.ShardID, epoch streaming.Epoch) error {
	_, err := h.current(pipeline, shard, epoch)
	return err
}

// current returns the held shard at epoch, syncing with the Source when
// the watch loop has not seen it yet.
func (h *Host) current(pipeline string, shard streaming.ShardID, epoch streaming.Epoch) (*heldShard, error) {
	if pipeline != h.pipeline {
		return nil, h.notOwner(shard, epoch, "serves pipeline "+h.pipeline+", not "+pipeline)
	}
	p, err := parseShard(shard)
	if err != nil {
		return nil, err
	}
	cp, e, ok := h.src.Checkpointer(p)
	if !ok || e != epoch {
		return nil, h.notOwner(shard, epoch, fmt.Sprintf("does not own it at this epoch (owned: %v, gained at epoch %d)", ok, uint64(e)))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if hs := h.held[shard]; hs != nil && hs.epoch == epoch && hs.cp == cp {
		return hs, nil
	}
	st := cp.Status()
	return &heldShard{shard: shard, part: p, epoch: e, cp: cp,
		restored: activities.RestoreSummary{CheckpointID: uint64(st.LastID), Epoch: st.LastEpoch, Cursor: st.LastCursor, Bytes: st.StateBytes}}, nil
}

// Held implements activities.ShardHost.
func (h *Host) Held() []activities.HeldShard {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]activities.HeldShard, 0, len(h.held))
	for _, hs := range h.held {
		out = append(out, activities.HeldShard{Pipeline: h.pipeline, Shard: hs.shard, Epoch: hs.epoch, TaskQueue: h.taskQueue, WorkerID: h.workerID})
	}
	slices.SortFunc(out, func(a, b activities.HeldShard) int { return strings.Compare(string(a.Shard), string(b.Shard)) })
	return out
}

// HeldShards returns the names of the shards held now, sorted.
func (h *Host) HeldShards() []streaming.ShardID {
	var out []streaming.ShardID
	for _, s := range h.Held() {
		out = append(out, s.Shard)
	}
	return out
}

// completed sums the completed checkpoints counted by the watch loop.
func (h *Host) completed() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nCompleted
}
