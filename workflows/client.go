package workflows

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/activities"
)

// This file holds the client side of the coordinator: the calls a worker
// (announce) and the CLI (checkpoint now, start) make. It runs outside
// workflows and may block; nothing here is called from workflow code.

// ErrStaleAnnouncement is wrapped by Announce's error when the coordinator
// knows a newer owner of an announced shard: the worker has lost it since.
var ErrStaleAnnouncement = errors.New("announcement is stale")

// StaleAnnouncementError is Announce's error when the coordinator refused
// an announcement as stale (it wraps ErrStaleAnnouncement). Shards are the
// announced shards whose newer owner it knows; the others were not
// recorded either (the whole announcement is refused), and may be
// announced again without them. Shards is empty when the coordinator did
// not name them (a run of a release before it did).
type StaleAnnouncementError struct {
	WorkerID string
	Shards   []activities.ShardEpoch
	// Reason is the coordinator's refusal, naming the first stale shard
	// and its owner.
	Reason string
}

func (e *StaleAnnouncementError) Error() string {
	return fmt.Sprintf("worker %q: %v: %s", e.WorkerID, ErrStaleAnnouncement, e.Reason)
}

func (e *StaleAnnouncementError) Unwrap() error { return ErrStaleAnnouncement }

// CoordinatorStartOptions returns the options that start a pipeline's
// coordinator, or join the one running: its id, the control queue, the
// pipeline search attribute, and the static summary and details the web
// UI shows on the workflow's User Metadata tab (its first screen, the
// history, reads round by round: see the coordinator's wait).
func CoordinatorStartOptions(in CoordinatorInput) client.StartWorkflowOptions {
	d := in.WithDefaults()
	rounds := fmt.Sprintf("every %s", d.Interval)
	if d.Manual {
		rounds = "on request only"
	}
	details := fmt.Sprintf("**Checkpoint coordinator** of pipeline `%s`.\n\n"+
		"- rounds %s: one activity per live worker (queue `tflo-worker-<id>`) checkpoints every shard it owns\n"+
		"- a worker that does not pick a round up within %s is unreachable for that round (not a failure)\n"+
		"- breaker: opens after %d consecutive rounds with storage failures, probes again after %s\n"+
		"- workers checkpoint on their own after %s without a round\n\n"+
		"Current details: the last round. Queries: `%s` (summary), `%s` (per-shard table; refused past some 4,600 shards), "+
		"`%s` (a page of it: `{\"after\": \"<last shard of the previous page>\"}`).",
		d.Pipeline, rounds, d.ReachTimeout, d.BreakerThreshold, d.BreakerCoolDown, d.MaxCheckpointAge, QueryStatus, QueryShards, QueryShardsPage)
	return client.StartWorkflowOptions{
		ID:                       CoordinatorWorkflowID(in.Pipeline),
		TaskQueue:                ControlTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    temporal.NewSearchAttributes(SearchPipeline.ValueSet(in.Pipeline)),
		StaticSummary:            fmt.Sprintf("checkpoint coordinator of %s: rounds %s", in.Pipeline, rounds),
		StaticDetails:            details,
	}
}

// Announce tells the pipeline's coordinator which shards a worker owns,
// starting the coordinator with in when none runs (update-with-start), and
// waits for the answer: the previous owner of each shard that moved. A
// stale epoch is refused with a *StaleAnnouncementError (wrapping
// ErrStaleAnnouncement) that names the stale shards.
func Announce(ctx context.Context, c client.Client, in CoordinatorInput, a Announcement) (AnnounceResult, error) {
	op := c.NewWithStartWorkflowOperation(CoordinatorStartOptions(in), CoordinatorWorkflow, in)
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   UpdateAnnounce,
			Args:         []any{a},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var res AnnounceResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err != nil {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == ErrTypeStaleEpoch {
			se := &StaleAnnouncementError{WorkerID: a.WorkerID, Reason: ae.Error()}
			if ae.HasDetails() {
				if derr := ae.Details(&se.Shards); derr != nil {
					se.Shards = nil
				}
			}
			return res, se
		}
		return res, fmt.Errorf("announce %d shards of worker %q to %s: %w", len(a.Shards), a.WorkerID, CoordinatorWorkflowID(in.Pipeline), err)
	}
	return res, nil
}

// CheckpointRoundNow asks the pipeline's coordinator for a round now and waits
// for it (Workflow Update, no polling): the round starts after the
// request, even if one is in flight, and its summary comes back. ctx
// bounds the wait.
func CheckpointRoundNow(ctx context.Context, c client.Client, pipeline, reason string) (RoundSummary, error) {
	id := CoordinatorWorkflowID(pipeline)
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   UpdateCheckpointNow,
		Args:         []any{CheckpointNowRequest{Reason: reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var s RoundSummary
	if err == nil {
		err = h.Get(ctx, &s)
	}
	if err != nil {
		return s, fmt.Errorf("checkpoint now of %s: %w", pipeline, err)
	}
	return s, nil
}

// CoordinatorRunning reports whether the pipeline's coordinator runs.
func CoordinatorRunning(ctx context.Context, c client.Client, pipeline string) (bool, error) {
	d, err := c.DescribeWorkflow(ctx, CoordinatorWorkflowID(pipeline), "")
	if err != nil {
		var nf *serviceerror.NotFound
		// Only the workflow's NotFound: a NamespaceNotFound ("Namespace x
		// is not found.") is an error, not a pipeline without a coordinator.
		if errors.As(err, &nf) {
			return false, nil
		}
		return false, err
	}
	return d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}
