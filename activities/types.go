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
	// ErrTypeSinkFailed: a replay's sink failed for good (it refused the
	// credentials, its bucket does not exist). Non-retryable: every
	// attempt would fail the same way until its configuration changes.
	ErrTypeSinkFailed = "SinkFailed"
	// ErrTypeStalled: a backfill's count of its archive made no progress
	// for CountStallLimit. Non-retryable: the store is down or hangs.
	ErrTypeStalled = "Stalled"
	// ErrTypeLeasesLost: the worker lost its presence leases (the lease
	// activity ends; the worker is alive). Its details are the shards the
	// worker held ([]HeldShard), which the lease workflow keeps for a
	// worker that dies before the restarted activity starts.
	ErrTypeLeasesLost = "LeasesLost"
)

// Default stage deadlines used by workflows unless their input overrides.
const (
	DefaultSnapshotTimeout = 30 * time.Second
	DefaultSaveTimeout     = 2 * time.Minute
	DefaultCommitTimeout   = 30 * time.Second
)
