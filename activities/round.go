package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/streaming"
)

// CheckpointHost is the worker side of checkpoint rounds: what a worker
// process exposes to the checkpoint coordinator. The coordinator runs one
// activity per live worker per round, on the worker's own task queue; the
// activity hands the round to the host. A handoff's final checkpoint is a
// one-worker round of one shard (RoundInput.Final).
//
// Shards implements it over streaming.Checkpointers: the pipeline
// runtime's shard host registers its Shards with Rounds, and Shards filled
// with in-memory stores is what tests and benchmarks use.
//
// Implementations are safe for concurrent use; calls may overlap (a
// handoff's final round during a periodic one).
type CheckpointHost interface {
	// CheckpointRound checkpoints in.Shards, each at the epoch given, and
	// returns one result per shard, in the order asked. Every shard
	// commits on its own (its own manifest, fenced by its own epoch); the
	// host batches their writes. A shard this worker does not own at its
	// epoch is ShardNotOwner and a storage failure ShardFailed: neither
	// is an error of the call. An error means the round could not run on
	// this worker at all (ctx ended, the host is closing).
	//
	// With in.Final (a handoff) a shard the worker already released at
	// that epoch — a Kafka revoke callback took its final checkpoint —
	// answers with that checkpoint instead of ShardNotOwner.
	//
	// Each result reports, in Local, the checkpoints the host took of the
	// shard on its own since it last answered a round (see Shards.RunLocal),
	// so a round after a Temporal outage accounts for them.
	CheckpointRound(ctx context.Context, in RoundInput) (RoundResult, error)
	// Notice tells the host about a change of the coordinator's state
	// between rounds (the breaker opened: no rounds until n.Until), so its
	// metrics show it and it does not mistake the pause for an outage.
	Notice(ctx context.Context, n CoordinatorNotice) error
}

// ShardEpoch is a shard at the owner epoch a round was scheduled for.
type ShardEpoch struct {
	Shard streaming.ShardID `json:"shard"`
	Epoch streaming.Epoch   `json:"epoch"`
}

// RoundInput asks one worker to checkpoint the shards it owns, as part of
// round Round of Pipeline's checkpoints.
type RoundInput struct {
	Pipeline string       `json:"pipeline"`
	Round    uint64       `json:"round"`
	WorkerID string       `json:"worker_id"`
	Shards   []ShardEpoch `json:"shards"`
	// Final marks a handoff's final checkpoint (see CheckpointHost).
	Final bool `json:"final,omitempty"`
	// Breaker is the coordinator's breaker as the round starts ("closed"
	// or "half-open": an open breaker runs no rounds).
	Breaker string `json:"breaker,omitempty"`
	// MaxCheckpointAge is how long the worker may go without a round
	// before it checkpoints on its own (the coordinator's setting).
	MaxCheckpointAge Duration `json:"max_checkpoint_age,omitempty"`
}

// Validate reports the first problem with the input, as a sentence.
func (in RoundInput) Validate() error {
	switch {
	case in.Pipeline == "":
		return fmt.Errorf("checkpoint round %d: pipeline is empty", in.Round)
	case in.WorkerID == "":
		return fmt.Errorf("checkpoint round %d of %s: worker id is empty", in.Round, in.Pipeline)
	case len(in.Shards) == 0:
		return fmt.Errorf("checkpoint round %d of %s on worker %q: no shards", in.Round, in.Pipeline, in.WorkerID)
	}
	for _, s := range in.Shards {
		if s.Shard == "" {
			return fmt.Errorf("checkpoint round %d of %s on worker %q: a shard has no name", in.Round, in.Pipeline, in.WorkerID)
		}
	}
	return nil
}

// Shard outcomes in a RoundResult.
const (
	// ShardOK: the shard's checkpoint committed.
	ShardOK = "ok"
	// ShardFailed: a storage failure (a store refused or timed out). The
	// only outcome the coordinator's breaker counts.
	ShardFailed = "failed"
	// ShardNotOwner: the worker does not own the shard at the epoch asked;
	// the coordinator leaves it out until its next owner announces itself.
	ShardNotOwner = "not-owner"
)

// ShardResult is one shard's outcome in a round: ids, cursor, sizes and
// durations, never state.
type ShardResult struct {
	Shard  streaming.ShardID `json:"shard"`
	Epoch  streaming.Epoch   `json:"epoch"`
	Status string            `json:"status"`
	// CheckpointID is the shard's newest committed checkpoint (this
	// round's when Status is ShardOK).
	CheckpointID uint64   `json:"checkpoint_id,omitempty"`
	Cursor       string   `json:"cursor,omitempty"`
	Bytes        int64    `json:"bytes,omitempty"`
	Duration     Duration `json:"duration,omitempty"`
	Error        string   `json:"error,omitempty"`
	// Local counts checkpoints the worker took on its own since it last
	// answered a round (none while rounds come on time).
	Local int `json:"local,omitempty"`
	// ArchivedRows and ArchivedBytes are what the checkpoint committed to
	// the Parquet archive (streaming.CheckpointStatus).
	ArchivedRows  int64 `json:"archived_rows,omitempty"`
	ArchivedBytes int64 `json:"archived_bytes,omitempty"`
}

// RoundResult is one worker's answer to a round.
type RoundResult struct {
	Round    uint64        `json:"round"`
	WorkerID string        `json:"worker_id"`
	Shards   []ShardResult `json:"shards"`
	Duration Duration      `json:"duration"`
}

// Bytes sums the bytes the round wrote.
func (r RoundResult) Bytes() int64 {
	var n int64
	for _, s := range r.Shards {
		if s.Status == ShardOK {
			n += s.Bytes
		}
	}
	return n
}

// Count returns how many shards ended with status.
func (r RoundResult) Count(status string) int {
	n := 0
	for _, s := range r.Shards {
		if s.Status == status {
			n++
		}
	}
	return n
}

// CoordinatorNotice is a change of the coordinator's state between rounds.
type CoordinatorNotice struct {
	Pipeline string `json:"pipeline"`
	// Breaker is the coordinator's breaker now.
	Breaker string `json:"breaker"`
	// Until is when the next round is due (the end of an open breaker's
	// cool-down).
	Until time.Time `json:"until,omitempty"`
	// Round is the last round the coordinator ran.
	Round uint64 `json:"round"`
}

// Default deadlines of a worker's round activity.
const (
	// DefaultRoundTimeout bounds one worker's whole round (all its shards'
	// stages) unless the coordinator's input overrides it.
	DefaultRoundTimeout = 2 * time.Minute
)

// Rounds is the checkpoint-round activity of one worker, registered on the
// worker's own task queue; the coordinator calls its methods by reference.
type Rounds struct {
	Host CheckpointHost
}

// CheckpointRound runs one worker's share of a round (see
// CheckpointHost.CheckpointRound).
func (a *Rounds) CheckpointRound(ctx context.Context, in RoundInput) (RoundResult, error) {
	if a.Host == nil {
		return RoundResult{}, temporal.NewNonRetryableApplicationError("round activity has no checkpoint host", ErrTypeBadInput, nil)
	}
	if err := in.Validate(); err != nil {
		return RoundResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	res, err := a.Host.CheckpointRound(ctx, in)
	if err != nil {
		return RoundResult{}, fmt.Errorf("worker %q, round %d of %s: %w", in.WorkerID, in.Round, in.Pipeline, err)
	}
	if len(res.Shards) != len(in.Shards) {
		return RoundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("worker %q, round %d of %s: the host answered for %d shards, %d were asked", in.WorkerID, in.Round, in.Pipeline, len(res.Shards), len(in.Shards)),
			ErrTypeBadInput, nil)
	}
	return res, nil
}

// Notice passes a coordinator notice to the host.
func (a *Rounds) Notice(ctx context.Context, n CoordinatorNotice) error {
	if a.Host == nil {
		return temporal.NewNonRetryableApplicationError("round activity has no checkpoint host", ErrTypeBadInput, nil)
	}
	return a.Host.Notice(ctx, n)
}
