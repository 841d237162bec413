package kafka

import (
	"context"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitions is the runtime that keeps the state of the partitions a
// Source's member owns (package pipeline is tflo's). The Source keeps no
// state of its own: it runs the group protocol, fetches, fences records
// of partitions it no longer owns, and hands each owned partition's
// records to the handler Open returned for it.
//
// Call order per partition: Open (in the assign callback, before the
// partition is fetched), Handle for each fetched batch (on the partition's
// goroutine, one call at a time), then Release (in the revoke or lost
// callback, after the goroutine stopped). Open is called concurrently for
// the partitions of one assignment.
type Partitions interface {
	// Open restores the state of the partition a describes and returns
	// its handler and the offset of the last record the restored state
	// contains (-1 when nothing is stored: the partition is consumed from
	// the start of its log). An error stops the Source.
	Open(ctx context.Context, a Assignment) (PartitionHandler, int64, error)
}

// Assignment describes a gained partition to Partitions.Open.
type Assignment struct {
	Partition Partition
	// Epoch is the router epoch at which this member gained the
	// partition: every durable write of the partition carries it.
	Epoch streaming.Epoch
	// Group is the consumer group.
	Group string
	// TopicPartitions is how many partitions the partition's topic has
	// (0 when the metadata request failed): the most shards a member can
	// own, which a runtime divides its memory budget by.
	TopicPartitions int
	// Cursors commits offsets to the group: the cursor stage of the
	// partition's checkpoints. The broker fences a member that left the
	// generation (streaming.ErrFenced).
	Cursors streaming.CursorStore
}

// PartitionHandler processes one owned partition's records.
type PartitionHandler interface {
	// Handle processes a batch of the partition's records in offset
	// order, on the partition's goroutine. ctx ends when the partition is
	// being released: the handler may stop early (the records it did not
	// process are replayed by the next owner, from the last checkpoint). A
	// non-nil error stops the Source.
	Handle(ctx context.Context, recs []*kgo.Record) error
	// Release ends the partition after its goroutine stopped. On a revoke
	// (final true) it takes the final checkpoint within ctx (bounded by
	// WithRevokeTimeout); on a lost assignment (final false) the group has
	// already moved on and it only drops the state. An error is logged and
	// counted (Stats.RevokeFailures); the partition is released anyway. A
	// final Release that fails as the member leaves the group (Run
	// stopping) also fails Run.
	Release(ctx context.Context, final bool) error
}

// WithPartitions sets the runtime the Source hands owned partitions to.
// Required.
func WithPartitions(ps Partitions) SourceOption {
	return func(c *sourceConfig) { c.partitions = ps }
}
