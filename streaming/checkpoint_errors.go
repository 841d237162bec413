package streaming

import (
	"errors"
	"fmt"
)

// ErrBreakerOpen is wrapped by errors from a Breaker while it is open, or
// half-open with its one probe already in flight.
var ErrBreakerOpen = errors.New("circuit breaker open")

// ErrStateNotSaved is wrapped by the error CommitCursor returns for a
// checkpoint whose state save has not succeeded: a cursor must never run
// ahead of the state it describes.
var ErrStateNotSaved = errors.New("state save of this checkpoint has not succeeded")

// ErrUnknownCheckpoint is wrapped by the errors SaveState and CommitCursor
// return for a checkpoint id that is not the one in flight: never cut, cut
// before a restart, or superseded by a newer Snapshot.
var ErrUnknownCheckpoint = errors.New("unknown checkpoint")

// NotOwnerError is returned for a checkpoint write refused because this
// process no longer owns the shard at the epoch the checkpoint carries. It
// wraps ErrFenced.
type NotOwnerError struct {
	Shard        string
	Checkpoint   CheckpointID
	Epoch        Epoch // the epoch the checkpoint carries
	CurrentEpoch Epoch // the router's epoch now
	Owns         bool  // whether the router owns the shard now
	Stage        string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("shard %q: %s of checkpoint %d refused: written at epoch %d, router is at epoch %d (owns shard: %t): %v",
		e.Shard, e.Stage, e.Checkpoint, e.Epoch, e.CurrentEpoch, e.Owns, ErrFenced)
}

func (e *NotOwnerError) Unwrap() error { return ErrFenced }

// StageError is returned by a Checkpointer stage that failed; it names the
// shard, the checkpoint and the stage and wraps the cause (a store error,
// context.DeadlineExceeded for a stage past its deadline).
type StageError struct {
	Shard      string
	Checkpoint CheckpointID
	Stage      string // "snapshot", "save-state", "commit-cursor", "restore"
	Err        error
}

func (e *StageError) Error() string {
	return fmt.Sprintf("shard %q: checkpoint %d: %s: %v", e.Shard, e.Checkpoint, e.Stage, e.Err)
}

func (e *StageError) Unwrap() error { return e.Err }
