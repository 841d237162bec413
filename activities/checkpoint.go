package activities

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/streaming"
)

// Shards is the registry of the shards this worker serves: the worker
// registers a shard's Checkpointer when it gains the shard and unregisters
// it when it loses it. Safe for concurrent use.
type Shards struct {
	mu     sync.RWMutex
	shards map[shardKey]*streaming.Checkpointer
}

type shardKey struct {
	pipeline string
	shard    streaming.ShardID
}

// NewShards returns an empty registry.
func NewShards() *Shards {
	return &Shards{shards: make(map[shardKey]*streaming.Checkpointer)}
}

// Register makes cp serve the stages of pipeline/shard.
func (r *Shards) Register(pipeline string, shard streaming.ShardID, cp *streaming.Checkpointer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shards[shardKey{pipeline, shard}] = cp
}

// Unregister stops serving pipeline/shard (the worker lost it).
func (r *Shards) Unregister(pipeline string, shard streaming.ShardID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.shards, shardKey{pipeline, shard})
}

// Lookup returns the Checkpointer serving ref, or a non-retryable NotOwner
// error when this worker does not serve the shard.
func (r *Shards) Lookup(ref ShardRef) (*streaming.Checkpointer, error) {
	r.mu.RLock()
	cp, ok := r.shards[shardKey{ref.Pipeline, ref.Shard}]
	r.mu.RUnlock()
	if !ok {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("shard %s/%s is not served by this worker (epoch %d)", ref.Pipeline, ref.Shard, ref.Epoch),
			ErrTypeNotOwner, nil)
	}
	return cp, nil
}

// Checkpoints runs the three checkpoint stages of the shards this worker
// serves, as activities on the worker's own task queue. Register it with
// worker.RegisterActivity; workflows call its methods by reference.
type Checkpoints struct {
	Shards *Shards
}

// NewCheckpoints returns the checkpoint activities over shards.
func NewCheckpoints(shards *Shards) *Checkpoints { return &Checkpoints{Shards: shards} }

func (a *Checkpoints) lookup(ref ShardRef) (*streaming.Checkpointer, error) {
	if a.Shards == nil {
		return nil, temporal.NewNonRetryableApplicationError("checkpoint activities have no shard registry", ErrTypeBadInput, nil)
	}
	return a.Shards.Lookup(ref)
}

// Snapshot cuts the shard's state at the current cursor (stage 1).
func (a *Checkpoints) Snapshot(ctx context.Context, ref ShardRef) (SnapshotResult, error) {
	cp, err := a.lookup(ref)
	if err != nil {
		return SnapshotResult{}, err
	}
	info, err := cp.Snapshot(ctx, ref.Epoch)
	if err != nil {
		return SnapshotResult{}, classify(err)
	}
	return SnapshotResult{CheckpointID: uint64(info.ID), Cursor: FormatCursor(info.CursorType, info.Cursor)}, nil
}

// SaveState writes the cut's state to the state store (stage 2).
func (a *Checkpoints) SaveState(ctx context.Context, in StageInput) (SaveResult, error) {
	cp, err := a.lookup(in.ShardRef)
	if err != nil {
		return SaveResult{}, err
	}
	info, err := cp.SaveState(ctx, streaming.CheckpointID(in.CheckpointID))
	if err != nil {
		return SaveResult{}, classify(err)
	}
	return SaveResult{Bytes: info.Bytes, Requests: info.Pieces}, nil
}

// CommitCursor saves the cursor of a checkpoint whose state is saved
// (stage 3).
func (a *Checkpoints) CommitCursor(ctx context.Context, in StageInput) (CommitResult, error) {
	cp, err := a.lookup(in.ShardRef)
	if err != nil {
		return CommitResult{}, err
	}
	if err := cp.CommitCursor(ctx, streaming.CheckpointID(in.CheckpointID)); err != nil {
		return CommitResult{}, classify(err)
	}
	return CommitResult{Cursor: cp.Status().LastCursor}, nil
}

// classify maps streaming errors to Temporal application errors: fencing
// and ordering errors are non-retryable, everything else retries.
func classify(err error) error {
	var notOwner *streaming.NotOwnerError
	switch {
	case errors.As(err, &notOwner), errors.Is(err, streaming.ErrFenced):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNotOwner, nil)
	case errors.Is(err, streaming.ErrStateNotSaved), errors.Is(err, streaming.ErrUnknownCheckpoint):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOutOfOrder, nil)
	}
	return err
}

// FormatCursor renders a cursor for workflow state and the web UI.
func FormatCursor(cursorType string, b []byte) string {
	if len(b) == 0 {
		return ""
	}
	switch cursorType {
	case "kafka":
		if k, err := streaming.ParseKafkaOffset(b); err == nil {
			return k.String()
		}
	}
	return cursorType + ":" + hex.EncodeToString(b)
}
