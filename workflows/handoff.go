package workflows

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// HandoffInput moves one shard from an old owner (nil or dead: skipped) to
// a new one. To may be nil: the workflow then waits for the new owner's
// SignalOwner (the data plane decides who that is).
type HandoffInput struct {
	Pipeline string            `json:"pipeline"`
	Shard    streaming.ShardID `json:"shard"`
	From     *Owner            `json:"from,omitempty"`
	// FromDead skips the final checkpoint (the lease workflow saw the old
	// owner's heartbeat time out).
	FromDead bool   `json:"from_dead,omitempty"`
	To       *Owner `json:"to,omitempty"`
	// OwnerWait bounds the wait for a new owner (default 10m).
	OwnerWait time.Duration `json:"owner_wait,omitempty"`
	// StepTimeout is each step's start-to-close deadline (default 2m); the
	// final checkpoint also gets it as schedule-to-start, so a dead old
	// owner is detected within it.
	StepTimeout time.Duration `json:"step_timeout,omitempty"`
	// FinalRound: the handoff was started by the pipeline's checkpoint
	// coordinator. The final checkpoint is then a one-worker round on the
	// old owner (activities.Rounds, the same code as every round), and no
	// announcement follows (the coordinator already knows the new owner).
	FinalRound bool `json:"final_round,omitempty"`
}

// Validate reports the first problem with the input.
func (in HandoffInput) Validate() error {
	if in.Pipeline == "" || in.Shard == "" {
		return errors.New("handoff workflow: pipeline and shard are required")
	}
	if in.OwnerWait < 0 || in.StepTimeout < 0 {
		return fmt.Errorf("handoff workflow %s/%s: durations must not be negative", in.Pipeline, in.Shard)
	}
	return nil
}

// HandoffState is the saga's progress: the status query returns it and the
// workflow returns it when done. It carries ids, epochs and sizes only.
type HandoffState struct {
	Pipeline string            `json:"pipeline"`
	Shard    streaming.ShardID `json:"shard"`
	Step     string            `json:"step"`
	From     *Owner            `json:"from,omitempty"`
	To       *Owner            `json:"to,omitempty"`

	FinalCheckpoint        *activities.CheckpointSummary `json:"final_checkpoint,omitempty"`
	FinalCheckpointSkipped string                        `json:"final_checkpoint_skipped,omitempty"`
	// Unmoved says why the saga moved nothing: the "new" owner is the old
	// one at the same epoch (a worker declared dead while it was alive
	// answers its own handoff).
	Unmoved  string                     `json:"unmoved,omitempty"`
	Restored *activities.RestoreSummary `json:"restored,omitempty"`
	Duration time.Duration              `json:"duration"`
}

// Handoff steps, in order.
const (
	StepAwaitOwner      = "await-owner"
	StepFinalCheckpoint = "final-checkpoint"
	StepEpochBump       = "epoch-bump"
	StepRestore         = "restore"
	StepResume          = "resume"
	StepAnnounce        = "announce"
	StepDone            = "done"
)

// HandoffWorkflow is the saga that moves a shard: final checkpoint on the
// old owner (skipped when it is dead or already released), the epoch bump
// (the new owner's epoch must be above the old one's), restore on the new
// owner and resume.
// Every step is idempotent on the worker side, so a crash of either worker
// or of the worker running this workflow ends with one owner and exact
// state: Temporal resumes the saga at the step it had reached.
func HandoffWorkflow(ctx workflow.Context, in HandoffInput) (HandoffState, error) {
	if err := in.Validate(); err != nil {
		return HandoffState{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeBadInput, nil)
	}
	if in.OwnerWait == 0 {
		in.OwnerWait = 10 * time.Minute
	}
	if in.StepTimeout == 0 {
		in.StepTimeout = 2 * time.Minute
	}
	st := HandoffState{Pipeline: in.Pipeline, Shard: in.Shard, From: in.From, To: in.To, Step: StepAwaitOwner}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (HandoffState, error) { return st, nil }); err != nil {
		return st, err
	}
	start := workflow.Now(ctx)
	var a *activities.Handoffs

	// 1. Who is the new owner?
	ownerCh := workflow.GetSignalChannel(ctx, SignalOwner)
	if st.To == nil {
		var o Owner
		ok, _ := ownerCh.ReceiveWithTimeout(ctx, in.OwnerWait, &o)
		if err := ctx.Err(); !ok && err != nil {
			// Cancelled: the wait returned at once, not after OwnerWait.
			return st, err
		}
		if !ok {
			return st, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("handoff of %s/%s: no new owner announced itself within %s", in.Pipeline, in.Shard, in.OwnerWait),
				"NoNewOwner", nil)
		}
		st.To = &o
	}

	// A worker declared dead while alive (Temporal was unreachable from it
	// for longer than its heartbeat timeout) still owns the shard at the
	// same epoch and answers for it: nothing moves.
	if st.From != nil && st.From.TaskQueue == st.To.TaskQueue && st.From.Epoch == st.To.Epoch &&
		workflow.GetVersion(ctx, "handoff-unmoved", workflow.DefaultVersion, 1) >= 1 {
		st.Unmoved = fmt.Sprintf("worker %q still owns the shard at epoch %d", st.To.WorkerID, st.To.Epoch)
		st.Step = StepDone
		st.Duration = workflow.Now(ctx).Sub(start)
		return st, nil
	}

	// 2. Final checkpoint on the old owner, unless it is dead or is the new owner.
	st.Step = StepFinalCheckpoint
	switch {
	case st.From == nil:
		st.FinalCheckpointSkipped = "no previous owner"
	case in.FromDead:
		st.FinalCheckpointSkipped = "previous owner is dead"
	case st.From.TaskQueue == st.To.TaskQueue:
		st.FinalCheckpointSkipped = "previous owner is the new owner"
	default:
		opts := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:              st.From.TaskQueue,
			ScheduleToStartTimeout: in.StepTimeout,
			StartToCloseTimeout:    in.StepTimeout,
			RetryPolicy: &temporal.RetryPolicy{
				MaximumAttempts:        3,
				NonRetryableErrorTypes: []string{activities.ErrTypeNotOwner, activities.ErrTypeBadInput},
			},
			Summary: fmt.Sprintf("final checkpoint of %s/%s on %s at epoch %d", in.Pipeline, in.Shard, st.From.WorkerID, st.From.Epoch),
		})
		sum, err := finalCheckpoint(ctx, opts, in, *st.From)
		if err != nil {
			// The next owner restores from the last durable checkpoint:
			// state stays exact, only the replay is longer.
			st.FinalCheckpointSkipped = "previous owner did not answer: " + err.Error()
		} else {
			st.FinalCheckpoint = &sum
		}
	}

	// 3. Epoch bump: the data plane gave the new owner a higher epoch.
	st.Step = StepEpochBump
	if st.From != nil && st.To.Epoch <= st.From.Epoch {
		return st, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("handoff of %s/%s: new owner %q has epoch %d, not above the old owner's %d",
				in.Pipeline, in.Shard, st.To.WorkerID, st.To.Epoch, st.From.Epoch), activities.ErrTypeNotOwner, nil)
	}

	// 4–5. Restore and resume on the new owner. A new owner that died
	// before picking the step up fails it within StepTimeout (schedule to
	// start) instead of holding the saga for ever; the next owner starts a
	// new handoff.
	toOpts := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              st.To.TaskQueue,
		ScheduleToStartTimeout: in.StepTimeout,
		StartToCloseTimeout:    in.StepTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumInterval:        30 * time.Second,
			NonRetryableErrorTypes: []string{activities.ErrTypeNotOwner, activities.ErrTypeBadInput},
		},
	})
	ref := activities.ShardRef{Pipeline: in.Pipeline, Shard: in.Shard, Epoch: st.To.Epoch}
	st.Step = StepRestore
	var restored activities.RestoreSummary
	if err := workflow.ExecuteActivity(toOpts, a.Restore, ref).Get(ctx, &restored); err != nil {
		return st, fmt.Errorf("handoff of %s/%s: restore on %q: %w", in.Pipeline, in.Shard, st.To.WorkerID, err)
	}
	st.Restored = &restored
	if st.FinalCheckpoint != nil && restored.CheckpointID < st.FinalCheckpoint.CheckpointID {
		return st, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("handoff of %s/%s: new owner restored checkpoint %d, older than the final checkpoint %d",
				in.Pipeline, in.Shard, restored.CheckpointID, st.FinalCheckpoint.CheckpointID), "StaleRestore", nil)
	}
	st.Step = StepResume
	if err := workflow.ExecuteActivity(toOpts, a.Resume, ref).Get(ctx, nil); err != nil {
		return st, fmt.Errorf("handoff of %s/%s: resume on %q: %w", in.Pipeline, in.Shard, st.To.WorkerID, err)
	}

	// 6. Handoffs of releases before the coordinator told the shard's
	// per-shard checkpoint workflow (since removed) who owns it now; their
	// histories still replay this step. A coordinator's handoff never had
	// it: the coordinator started it because the new owner announced
	// itself there.
	if !in.FinalRound && workflow.GetVersion(ctx, "no-checkpoint-workflow", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		st.Step = StepAnnounce
		sig := workflow.SignalExternalWorkflow(ctx, legacyCheckpointWorkflowID(in.Pipeline, in.Shard), "", SignalOwner, *st.To)
		if err := sig.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Info("checkpoint workflow not signalled", "error", err)
		}
	}
	st.Step = StepDone
	st.Duration = workflow.Now(ctx).Sub(start)
	return st, nil
}

// finalCheckpoint runs the old owner's final checkpoint: a one-worker
// round of one shard for a coordinator's handoff, the FinalCheckpoint
// activity otherwise.
func finalCheckpoint(ctx, opts workflow.Context, in HandoffInput, from Owner) (activities.CheckpointSummary, error) {
	ref := activities.ShardRef{Pipeline: in.Pipeline, Shard: in.Shard, Epoch: from.Epoch}
	if !in.FinalRound {
		var a *activities.Handoffs
		var sum activities.CheckpointSummary
		err := workflow.ExecuteActivity(opts, a.FinalCheckpoint, ref).Get(ctx, &sum)
		return sum, err
	}
	var r *activities.Rounds
	var res activities.RoundResult
	round := activities.RoundInput{Pipeline: in.Pipeline, WorkerID: from.WorkerID, Final: true,
		Shards: []activities.ShardEpoch{{Shard: in.Shard, Epoch: from.Epoch}}}
	if err := workflow.ExecuteActivity(opts, r.CheckpointRound, round).Get(ctx, &res); err != nil {
		return activities.CheckpointSummary{}, err
	}
	if len(res.Shards) != 1 || res.Shards[0].Status != activities.ShardOK {
		why := "no result"
		if len(res.Shards) == 1 {
			why = res.Shards[0].Status + ": " + res.Shards[0].Error
		}
		return activities.CheckpointSummary{}, fmt.Errorf("final round on %q: %s", from.WorkerID, why)
	}
	sr := res.Shards[0]
	return activities.CheckpointSummary{CheckpointID: sr.CheckpointID, Epoch: sr.Epoch, Cursor: sr.Cursor, Bytes: sr.Bytes, Duration: sr.Duration.D()}, nil
}

// legacyCheckpointWorkflowID is the id the removed per-shard checkpoint
// workflow ran under (for the handoff step that replays old histories).
func legacyCheckpointWorkflowID(pipeline string, shard streaming.ShardID) string {
	return fmt.Sprintf("tflo-checkpoint:%s/%s", url.PathEscape(pipeline), url.PathEscape(string(shard)))
}
