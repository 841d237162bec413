package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
)

// BackfillTaskQueue is where backfill activities run by default: any
// worker with access to the archive and the sink may serve it.
const BackfillTaskQueue = "tflo-backfill"

// BackfillInput starts a backfill: replay an archive (or the part of it in
// a time range) through a graph into a sink.
type BackfillInput struct {
	Name     string `json:"name"`
	Location string `json:"location"`
	// ExpectedFingerprint of the archive schema (default: this build's).
	ExpectedFingerprint string    `json:"expected_fingerprint,omitempty"`
	From                time.Time `json:"from,omitempty"`
	To                  time.Time `json:"to,omitempty"`
	Graph               string    `json:"graph,omitempty"`
	Sink                string    `json:"sink"`
	// Window is how many files replay at once (default 4).
	Window int `json:"window,omitempty"`
	// TaskQueue of the replay activities (default BackfillTaskQueue).
	TaskQueue string `json:"task_queue,omitempty"`
	// HeartbeatTimeout of a replay activity (default 30s).
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
}

// Validate reports the first problem with the input.
func (in BackfillInput) Validate() error {
	switch {
	case in.Location == "":
		return errors.New("backfill: archive location is required")
	case in.Sink == "":
		return errors.New("backfill: sink is required")
	case in.Window < 0:
		return fmt.Errorf("backfill %q: window %d must not be negative", in.Name, in.Window)
	case !in.From.IsZero() && !in.To.IsZero() && !in.From.Before(in.To):
		return fmt.Errorf("backfill %q: time range [%s, %s) is empty", in.Name, in.From.Format(time.RFC3339), in.To.Format(time.RFC3339))
	}
	return nil
}

// BackfillProgress is what the status query returns (the CLI draws its
// progress bar from it) and what the workflow returns.
type BackfillProgress struct {
	Name       string    `json:"name"`
	FilesTotal int       `json:"files_total"`
	FilesDone  int       `json:"files_done"`
	RowsTotal  int64     `json:"rows_total"`
	RowsDone   int64     `json:"rows_done"`
	Written    int64     `json:"written"`
	Skipped    int64     `json:"skipped"`
	Running    []string  `json:"running,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	// RowsPerSecond since the start and the estimated time left, computed
	// when queried.
	RowsPerSecond float64       `json:"rows_per_second"`
	ETA           time.Duration `json:"eta"`
	Done          bool          `json:"done"`
}

// BackfillWorkflow lists the archive (refusing a schema-fingerprint
// mismatch with a non-retryable error naming both fingerprints), then
// replays its files in a bounded sliding window of activities that
// heartbeat their row and resume from it on retry. It answers QueryStatus
// with progress and stops on cancellation. Only names and counts travel
// through history.
func BackfillWorkflow(ctx workflow.Context, in BackfillInput) (BackfillProgress, error) {
	if err := in.Validate(); err != nil {
		return BackfillProgress{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeBadInput, nil)
	}
	if in.Window == 0 {
		in.Window = 4
	}
	if in.TaskQueue == "" {
		in.TaskQueue = BackfillTaskQueue
	}
	if in.HeartbeatTimeout == 0 {
		in.HeartbeatTimeout = 30 * time.Second
	}
	p := BackfillProgress{Name: in.Name, StartedAt: workflow.Now(ctx)}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (BackfillProgress, error) {
		q := p
		if el := workflow.Now(ctx).Sub(p.StartedAt).Seconds(); el > 0 && q.RowsDone > 0 {
			q.RowsPerSecond = float64(q.RowsDone) / el
			q.ETA = time.Duration(float64(q.RowsTotal-q.RowsDone) / q.RowsPerSecond * float64(time.Second))
		}
		q.Running = append([]string(nil), p.Running...)
		return q, nil
	}); err != nil {
		return p, err
	}

	var a *activities.Backfills
	listCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           in.TaskQueue,
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			MaximumAttempts:        5,
			NonRetryableErrorTypes: []string{activities.ErrTypeSchemaMismatch, activities.ErrTypeBadInput},
		},
	})
	var plan activities.ListArchiveResult
	if err := workflow.ExecuteActivity(listCtx, a.ListArchive, activities.ListArchiveInput{
		Location: in.Location, ExpectedFingerprint: in.ExpectedFingerprint,
	}).Get(ctx, &plan); err != nil {
		return p, err
	}
	p.FilesTotal = len(plan.Files)
	p.RowsTotal = plan.TotalRows

	replayCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           in.TaskQueue,
		StartToCloseTimeout: 6 * time.Hour,
		HeartbeatTimeout:    in.HeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumInterval:        time.Minute,
			NonRetryableErrorTypes: []string{activities.ErrTypeSchemaMismatch, activities.ErrTypeBadInput},
		},
	})
	sel := workflow.NewSelector(ctx)
	inFlight := 0
	var firstErr error
	start := func(f activities.ArchiveFile) {
		fut := workflow.ExecuteActivity(replayCtx, a.ReplayFile, activities.ReplayFileInput{
			Location: in.Location, File: f.Name, ExpectedFingerprint: in.ExpectedFingerprint,
			From: in.From, To: in.To, Graph: in.Graph, Sink: in.Sink,
		})
		inFlight++
		p.Running = append(p.Running, f.Name)
		sel.AddFuture(fut, func(fut workflow.Future) {
			inFlight--
			p.Running = remove(p.Running, f.Name)
			var res activities.ReplayFileResult
			if err := fut.Get(ctx, &res); err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("replay %s: %w", f.Name, err)
				}
				return
			}
			p.FilesDone++
			p.RowsDone += f.Rows
			p.Written += res.Written
			p.Skipped += res.Skipped
		})
	}
	next := 0
	for next < len(plan.Files) || inFlight > 0 {
		for firstErr == nil && ctx.Err() == nil && inFlight < in.Window && next < len(plan.Files) {
			start(plan.Files[next])
			next++
		}
		if inFlight == 0 {
			break
		}
		sel.Select(ctx)
	}
	if err := ctx.Err(); err != nil {
		return p, temporal.NewCanceledError(p)
	}
	if firstErr != nil {
		return p, firstErr
	}
	p.Done = true
	return p, nil
}

func remove(xs []string, x string) []string {
	for i, v := range xs {
		if v == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}
