package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// ErrNotHeld is returned by the handoff steps for a shard this worker does
// not hold at the requested epoch. It wraps streaming.ErrFenced, so
// package activities classifies it as the non-retryable NotOwner.
var ErrNotHeld = fmt.Errorf("shard not held by this worker: %w", streaming.ErrFenced)

// host is the worker's activities.ShardHost: the shards it holds, and the
// last checkpoint of each it released. The source tells it when it gains
// and loses a shard (events, not polling); it registers the shard's
// checkpointer for the checkpoint activities and hands the event to the
// control plane.
//
// Safe for concurrent use.
type host struct {
	w         *Worker
	pipeline  string
	workerID  string
	taskQueue string
	shards    *activities.Shards
	control   controlPlane

	mu       sync.Mutex
	held     map[streaming.ShardID]*shard
	released map[streaming.ShardID]releasedShard // last release of each shard
}

type releasedShard struct {
	epoch   streaming.Epoch
	summary activities.CheckpointSummary
	final   bool // the release took a final checkpoint (summary is it)
}

var _ activities.ShardHost = (*host)(nil)

// controlPlane is what drives the shards' checkpoints and hears of their
// moves: the pipeline's checkpoint coordinator on Temporal
// (workflowControl), or in-process checkpoints without Temporal
// (localControl).
type controlPlane interface {
	// gained: the worker holds s now (restored, before its first record).
	gained(s *shard)
	// lost: the worker released s (after its final checkpoint, if any).
	lost(s *shard)
	// run works in the background until ctx ends, then waits for what it
	// started.
	run(ctx context.Context)
}

func (h *host) gained(s *shard) {
	h.mu.Lock()
	h.held[s.id] = s
	h.mu.Unlock()
	h.shards.Register(h.pipeline, s.id, s.cp)
	h.w.log.Info("shard gained", "shard", s.id, "epoch", uint64(s.epoch),
		"restored_checkpoint", s.restored.CheckpointID, "cursor", s.restored.Cursor)
	h.control.gained(s)
}

func (h *host) lost(s *shard) {
	sum := s.summary()
	h.mu.Lock()
	held := h.held[s.id] == s
	if held {
		delete(h.held, s.id)
	}
	h.released[s.id] = releasedShard{epoch: s.epoch, summary: sum, final: s.finalDone}
	h.mu.Unlock()
	if held { // not when a new run of the shard replaced it: its series
		h.w.m.released(s.id)
	}
	if s.finalDone {
		h.shards.Unregister(h.pipeline, s.id)
	} else { // a handoff's final round must not take the last checkpoint for a final one
		h.shards.UnregisterWithoutFinal(h.pipeline, s.id)
	}
	h.w.log.Info("shard released", "shard", s.id, "epoch", uint64(s.epoch), "last_checkpoint", sum.CheckpointID)
	h.control.lost(s)
}

// heldShards returns the shards held now.
func (h *host) heldShards() []*shard {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*shard, 0, len(h.held))
	for _, s := range h.held {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *shard) int { return strings.Compare(string(a.id), string(b.id)) })
	return out
}

// holds reports whether s is still held (not released, not replaced).
func (h *host) holds(s *shard) bool {
	cur, ok := h.holding(s.id, s.epoch)
	return ok && cur == s
}

// holding returns the shard held at exactly epoch.
func (h *host) holding(id streaming.ShardID, epoch streaming.Epoch) (*shard, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.held[id]
	return s, s != nil && s.epoch == epoch
}

func (h *host) notOwner(shard streaming.ShardID, epoch streaming.Epoch, why string) error {
	return fmt.Errorf("worker %q, shard %s/%s at epoch %d: %s: %w", h.workerID, h.pipeline, shard, uint64(epoch), why, ErrNotHeld)
}

func (h *host) checkPipeline(pipeline string, shard streaming.ShardID, epoch streaming.Epoch) error {
	if pipeline != h.pipeline {
		return h.notOwner(shard, epoch, "serves pipeline "+h.pipeline+", not "+pipeline)
	}
	return nil
}

// FinalCheckpoint implements activities.ShardHost. A Kafka member cannot
// stop serving a partition on its own (the group assigns it), so when the
// shard is still held at epoch this takes a checkpoint now; when it was
// released (the revoke took the final checkpoint) it returns that
// checkpoint. A release that took none (a lost partition, a final
// checkpoint that failed) is refused (ErrNotHeld), saying so and naming
// the last checkpoint, which the next owner replays from.
func (h *host) FinalCheckpoint(ctx context.Context, pipeline string, id streaming.ShardID, epoch streaming.Epoch) (activities.CheckpointSummary, error) {
	if err := h.checkPipeline(pipeline, id, epoch); err != nil {
		return activities.CheckpointSummary{}, err
	}
	if s, ok := h.holding(id, epoch); ok {
		res, err := s.cp.Checkpoint(ctx)
		if err != nil {
			return activities.CheckpointSummary{}, err
		}
		return activities.CheckpointSummary{CheckpointID: uint64(res.ID), Epoch: res.Epoch, Cursor: s.cp.Status().LastCursor, Bytes: res.Bytes, Duration: res.Duration}, nil
	}
	h.mu.Lock()
	r, ok := h.released[id]
	cur := h.held[id]
	h.mu.Unlock()
	if !ok || r.epoch != epoch {
		// Only the last release of a shard is kept: an earlier epoch's
		// is not known to be never held.
		why := "never held it at this epoch"
		switch {
		case cur != nil:
			why = fmt.Sprintf("holds it at epoch %d now, and keeps only the last release of a shard", uint64(cur.epoch))
		case ok:
			why = fmt.Sprintf("last released it at epoch %d, and keeps only the last release of a shard", uint64(r.epoch))
		}
		return activities.CheckpointSummary{}, h.notOwner(id, epoch, why)
	}
	if !r.final {
		return activities.CheckpointSummary{}, h.notOwner(id, epoch, fmt.Sprintf(
			"released it without a final checkpoint (the partition was lost, or its final checkpoint failed): its next owner replays from checkpoint %d", r.summary.CheckpointID))
	}
	return r.summary, nil
}

// Restore implements activities.ShardHost: the worker restored the shard
// from its newest durable checkpoint when it gained it; this reports that
// restore, and refuses when the shard is not held at exactly epoch.
func (h *host) Restore(_ context.Context, pipeline string, id streaming.ShardID, epoch streaming.Epoch) (activities.RestoreSummary, error) {
	if err := h.checkPipeline(pipeline, id, epoch); err != nil {
		return activities.RestoreSummary{}, err
	}
	s, ok := h.holding(id, epoch)
	if !ok {
		return activities.RestoreSummary{}, h.notOwner(id, epoch, "does not hold it at this epoch")
	}
	return s.restored, nil
}

// Resume implements activities.ShardHost: a gained shard is consumed right
// after its restore, so this only checks that it is held at epoch.
func (h *host) Resume(_ context.Context, pipeline string, id streaming.ShardID, epoch streaming.Epoch) error {
	if err := h.checkPipeline(pipeline, id, epoch); err != nil {
		return err
	}
	if _, ok := h.holding(id, epoch); !ok {
		return h.notOwner(id, epoch, "does not hold it at this epoch")
	}
	return nil
}

// Held implements activities.ShardHost.
func (h *host) Held() []activities.HeldShard {
	var out []activities.HeldShard
	for _, s := range h.heldShards() {
		out = append(out, activities.HeldShard{Pipeline: h.pipeline, Shard: s.id, Epoch: s.epoch, TaskQueue: h.taskQueue, WorkerID: h.workerID})
	}
	return out
}
