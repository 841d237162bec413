package activities

import (
	"time"

	"github.com/tflo-io/tflo/streaming"
)

// ShardRef names one shard of a pipeline at the owner epoch an activity was
// scheduled for. An activity refuses (non-retryable ErrTypeNotOwner) when
// its worker no longer owns the shard at that epoch.
type ShardRef struct {
	Pipeline string            `json:"pipeline"`
	Shard    streaming.ShardID `json:"shard"`
	Epoch    streaming.Epoch   `json:"epoch"`
}

// SnapshotResult is what the snapshot stage reports: the id of the cut and
// the cursor it reflects. The state itself stays in the worker.
type SnapshotResult struct {
	CheckpointID uint64 `json:"checkpoint_id"`
	Cursor       string `json:"cursor"`
	Keys         int    `json:"keys"`
}

// StageInput addresses one stage of one checkpoint of a shard.
type StageInput struct {
	ShardRef
	CheckpointID uint64 `json:"checkpoint_id"`
}

// SaveResult is what the state-save stage reports.
type SaveResult struct {
	Bytes    int64 `json:"bytes"`
	Requests int   `json:"requests"`
}

// CommitResult is what the cursor-commit stage reports.
type CommitResult struct {
	Cursor string `json:"cursor"`
}

// Error types of application errors raised by activities. Workflows match
// on these strings; classification happens here only.
const (
	// ErrTypeNotOwner: the worker does not own the shard at the requested
	// epoch. Non-retryable: wait for the next owner.
	ErrTypeNotOwner = "NotOwner"
	// ErrTypeOutOfOrder: a stage was called for a checkpoint whose previous
	// stage did not succeed. Non-retryable: start a new checkpoint.
	ErrTypeOutOfOrder = "OutOfOrder"
	// ErrTypeSchemaMismatch: an archive's schema fingerprint does not match.
	ErrTypeSchemaMismatch = "SchemaMismatch"
	// ErrTypeBadInput: the activity input cannot be acted on.
	ErrTypeBadInput = "BadInput"
	// ErrTypeCorrupt: data read (an archive file) fails its checksum or
	// cannot be decoded. Non-retryable: reading it again gives the same.
	ErrTypeCorrupt = "Corrupt"
)

// Default stage deadlines used by workflows unless their input overrides.
const (
	DefaultSnapshotTimeout = 30 * time.Second
	DefaultSaveTimeout     = 2 * time.Minute
	DefaultCommitTimeout   = 30 * time.Second
)
