package workflows

import (
	"fmt"
	"net/url"

	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/streaming"
)

// Task queues and workflow-id prefixes, defined once. Workflows run on the
// control queue; activities that touch a worker's in-process state run on
// that worker's own queue (WorkerTaskQueue).
const (
	// ControlTaskQueue is where tflo's workflows run.
	ControlTaskQueue = "tflo-control"
	// workerTaskQueuePrefix + worker id is a worker's own activity queue.
	workerTaskQueuePrefix = "tflo-worker-"

	CoordinatorWorkflowIDPrefix = "tflo-coordinator:"
	HandoffWorkflowIDPrefix     = "tflo-handoff:"
	LeaseWorkflowIDPrefix       = "tflo-lease:"
	BackfillWorkflowIDPrefix    = "tflo-backfill:"
)

// Update, signal and query names.
const (
	// UpdateCheckpointNow asks a pipeline's coordinator for a round now and
	// returns the round's summary (CheckpointNowRequest → RoundSummary).
	UpdateCheckpointNow = "checkpoint-now"
	// UpdateAnnounce tells a pipeline's coordinator which shards a worker
	// owns (Announcement → AnnounceResult), usually as update-with-start.
	UpdateAnnounce = "announce"
	// SignalWorkerGone tells a coordinator that a worker died (WorkerGone).
	SignalWorkerGone = "worker-gone"
	// QueryShards returns a coordinator's whole per-shard table
	// ([]ShardRow): Temporal refuses an answer over 2 MB, about 4,600
	// shards of rows as a long-running pipeline has them. Kept for
	// starters of earlier builds; QueryShardsPage reads any size.
	QueryShards = "shards"
	// QueryShardsPage returns a page of a coordinator's per-shard table
	// (ShardsPageRequest → ShardsPage), well under Temporal's limits at
	// any shard count.
	QueryShardsPage = "shards-page"

	// SignalOwner tells a handoff that waits for its new owner (started
	// by a lease workflow without a coordinator) who that is (Owner).
	SignalOwner = "owner"
	// SignalStop asks a long-running workflow to finish after its current step.
	SignalStop = "stop"
	// QueryStatus returns a workflow's State struct.
	QueryStatus = "status"
)

// Custom search attributes, so checkpoints can be filtered in the web UI
// (for example `TfloPipeline = "iot-portal" and TfloBreakerState = "open"`).
var (
	SearchPipeline     = temporal.NewSearchAttributeKeyKeyword("TfloPipeline")
	SearchBreakerState = temporal.NewSearchAttributeKeyKeyword("TfloBreakerState")
)

// SearchAttributeFlags returns the `--search-attribute Name=Type` arguments
// that register tflo's search attributes on `temporal server start-dev`.
func SearchAttributeFlags() []string {
	return []string{
		"--search-attribute", SearchPipeline.GetName() + "=Keyword",
		"--search-attribute", SearchBreakerState.GetName() + "=Keyword",
	}
}

// WorkerTaskQueue is the activity task queue of one worker process.
func WorkerTaskQueue(workerID string) string { return workerTaskQueuePrefix + workerID }

// CoordinatorWorkflowID is the id of a pipeline's checkpoint coordinator.
func CoordinatorWorkflowID(pipeline string) string {
	return CoordinatorWorkflowIDPrefix + url.PathEscape(pipeline)
}

// HandoffWorkflowID is the id of a shard's handoff started by the lease
// workflow of a dead owner without a coordinator (LeaseInput.Coordinated
// unset): the handoff waits for its new owner's SignalOwner, and a start
// while one runs joins the running one. A coordinator's handoffs use
// HandoffWorkflowIDAt.
func HandoffWorkflowID(pipeline string, shard streaming.ShardID) string {
	return fmt.Sprintf("%s%s/%s", HandoffWorkflowIDPrefix, url.PathEscape(pipeline), url.PathEscape(string(shard)))
}

// HandoffWorkflowIDAt is the id of the handoff a pipeline's coordinator
// starts when a shard moves to an owner at epoch: one per move, so a
// handoff still running towards an owner the group has since replaced
// never blocks the next one.
func HandoffWorkflowIDAt(pipeline string, shard streaming.ShardID, epoch streaming.Epoch) string {
	return fmt.Sprintf("%s@%d", HandoffWorkflowID(pipeline, shard), epoch)
}

// LeaseWorkflowID is the id of a worker's lease workflow.
func LeaseWorkflowID(workerID string) string { return LeaseWorkflowIDPrefix + url.PathEscape(workerID) }

// BackfillWorkflowID is the id of a named backfill run.
func BackfillWorkflowID(name string) string { return BackfillWorkflowIDPrefix + url.PathEscape(name) }
