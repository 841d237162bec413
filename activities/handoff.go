package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/streaming"
)

// ShardHost is what a worker exposes to the handoff and lease activities:
// the shards it serves and the moves of one shard. Each call is idempotent
// — a retried call after a crash of the orchestrator changes nothing more
// than the first one did. Implementations are safe for concurrent use.
type ShardHost interface {
	// FinalCheckpoint checkpoints pipeline/shard at epoch and stops
	// serving it. If the worker already released the shard (for example
	// in a Kafka revoke callback) it returns that last checkpoint.
	FinalCheckpoint(ctx context.Context, pipeline string, shard streaming.ShardID, epoch streaming.Epoch) (CheckpointSummary, error)
	// Restore loads the shard's newest durable checkpoint for epoch. A
	// second call at the same epoch returns the first call's result.
	Restore(ctx context.Context, pipeline string, shard streaming.ShardID, epoch streaming.Epoch) (RestoreSummary, error)
	// Resume starts consuming after the restored cursor.
	Resume(ctx context.Context, pipeline string, shard streaming.ShardID, epoch streaming.Epoch) error
	// Held lists the shards the worker serves now, with their epochs.
	Held() []HeldShard
}

// CheckpointSummary describes a checkpoint for workflow history: ids,
// cursors and sizes, never state.
type CheckpointSummary struct {
	CheckpointID uint64          `json:"checkpoint_id"`
	Epoch        streaming.Epoch `json:"epoch"`
	Cursor       string          `json:"cursor"`
	Bytes        int64           `json:"bytes"`
	Duration     time.Duration   `json:"duration"`
}

// RestoreSummary describes what a restore loaded.
type RestoreSummary struct {
	CheckpointID uint64          `json:"checkpoint_id"`
	Epoch        streaming.Epoch `json:"epoch"` // the epoch the checkpoint was written at
	Cursor       string          `json:"cursor"`
	Bytes        int64           `json:"bytes"`
}

// HeldShard is one shard a worker serves.
type HeldShard struct {
	Pipeline  string            `json:"pipeline"`
	Shard     streaming.ShardID `json:"shard"`
	Epoch     streaming.Epoch   `json:"epoch"`
	TaskQueue string            `json:"task_queue"`
	WorkerID  string            `json:"worker_id"`
}

// Handoffs are the steps of the handoff workflow, run on the old and the
// new owner's task queues.
type Handoffs struct {
	Host ShardHost
}

// FinalCheckpoint runs the old owner's last checkpoint of a shard.
func (a *Handoffs) FinalCheckpoint(ctx context.Context, ref ShardRef) (CheckpointSummary, error) {
	if a.Host == nil {
		return CheckpointSummary{}, temporal.NewNonRetryableApplicationError("handoff activities have no shard host", ErrTypeBadInput, nil)
	}
	s, err := a.Host.FinalCheckpoint(ctx, ref.Pipeline, ref.Shard, ref.Epoch)
	return s, classify(err)
}

// Restore loads the shard's newest checkpoint on the new owner.
func (a *Handoffs) Restore(ctx context.Context, ref ShardRef) (RestoreSummary, error) {
	if a.Host == nil {
		return RestoreSummary{}, temporal.NewNonRetryableApplicationError("handoff activities have no shard host", ErrTypeBadInput, nil)
	}
	s, err := a.Host.Restore(ctx, ref.Pipeline, ref.Shard, ref.Epoch)
	return s, classify(err)
}

// Resume starts consumption on the new owner.
func (a *Handoffs) Resume(ctx context.Context, ref ShardRef) error {
	if a.Host == nil {
		return temporal.NewNonRetryableApplicationError("handoff activities have no shard host", ErrTypeBadInput, nil)
	}
	return classify(a.Host.Resume(ctx, ref.Pipeline, ref.Shard, ref.Epoch))
}

// LeaseKeeper renews a worker's coordination leases on its own goroutine
// and timer (see package coordination); the lease activity only reports on
// it. Renewal therefore goes on while Temporal is unreachable.
type LeaseKeeper interface {
	// Err returns nil while the leases are renewed, and the reason once
	// the keeper has self-fenced or stopped.
	Err() error
}

// LeaseInput addresses one worker's lease activity.
type LeaseInput struct {
	WorkerID string `json:"worker_id"`
	// Interval between heartbeats (the workflow sets it to a third of the
	// heartbeat timeout).
	Interval time.Duration `json:"interval"`
}

// Leases is the long-running lease activity of one worker.
type Leases struct {
	Host   ShardHost
	Keeper LeaseKeeper
}

// KeepLeases heartbeats the shards this worker holds until ctx ends (the
// worker shuts down: it returns nil) or the keeper fails (a retryable
// ErrTypeLeasesLost error whose details are the held shards). Each
// heartbeat carries the held shards, so when the worker dies and the
// heartbeat times out the workflow knows what to hand off.
func (a *Leases) KeepLeases(ctx context.Context, in LeaseInput) error {
	if a.Host == nil || in.Interval <= 0 {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("lease activity of worker %q: needs a shard host and a positive interval", in.WorkerID), ErrTypeBadInput, nil)
	}
	t := time.NewTicker(in.Interval)
	defer t.Stop()
	for {
		if a.Keeper != nil {
			if err := a.Keeper.Err(); err != nil {
				return temporal.NewApplicationError(fmt.Sprintf("worker %q: leases lost: %v", in.WorkerID, err), ErrTypeLeasesLost, a.Host.Held())
			}
		}
		activity.RecordHeartbeat(ctx, a.Host.Held())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
