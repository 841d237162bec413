package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
)

// BackfillTaskQueue is where backfill activities run by default: any
// worker with access to the archive and the sink may serve it.
const BackfillTaskQueue = "tflo-backfill"

// BackfillInput starts a backfill: replay an archive (or the part of it in
// a time range) through a graph into a sink.
type BackfillInput struct {
	Name string `json:"name"`
	// Location of the archive: file:///dir or s3://bucket/prefix.
	Location string `json:"location"`
	// ExpectedFingerprint of the archive schema (default: this build's).
	ExpectedFingerprint string    `json:"expected_fingerprint,omitempty"`
	From                time.Time `json:"from,omitempty"`
	To                  time.Time `json:"to,omitempty"`
	Graph               string    `json:"graph,omitempty"`
	Sink                string    `json:"sink"`
	// Window is how many partitions (or batches of small ones) replay at
	// once (default 4). (Before the partition-paged workflow, how many
	// files.)
	Window int `json:"window,omitempty"`
	// FilesPerActivity bounds the files one replay activity finishes
	// (default 256).
	FilesPerActivity int `json:"files_per_activity,omitempty"`
	// ActivitiesPerRun: after this many replay activities (or when
	// Temporal suggests it) the workflow continues as new, carrying its
	// state (default 500).
	ActivitiesPerRun int `json:"activities_per_run,omitempty"`
	// TaskQueue of the replay activities (default BackfillTaskQueue).
	TaskQueue string `json:"task_queue,omitempty"`
	// HeartbeatTimeout of a replay activity (default 30s).
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// Resume is the state a previous run continued as new with (set by
	// the workflow only).
	Resume *BackfillState `json:"resume,omitempty"`
}

// BackfillState is what a backfill carries across continue-as-new: its
// progress, where the partition listing stands, the partitions listed
// but not started, and the partitions in flight with their positions.
type BackfillState struct {
	Progress BackfillProgress `json:"progress"`
	// ListedAfter is the last partition listed; ListingDone: no more.
	ListedAfter string `json:"listed_after,omitempty"`
	ListingDone bool   `json:"listing_done,omitempty"`
	// Queue holds partitions listed and not started, in order.
	Queue []string `json:"queue,omitempty"`
	// Lanes are the partitions started and not finished.
	Lanes []BackfillLane `json:"lanes,omitempty"`
}

// BackfillLane is one partition in flight and where it stands, and the
// partitions its next activity replays after it (small partitions go in
// batches, see BackfillWorkflow). Those an activity did not start when it
// stopped go back to the queue; the lane goes on alone (before, and in
// lanes carried over from a run then, Then kept them).
type BackfillLane struct {
	Partition string           `json:"partition"`
	Next      parquet.Position `json:"next"`
	Then      []string         `json:"then,omitempty"`
}

// Validate reports the first problem with the input.
func (in BackfillInput) Validate() error {
	switch {
	case in.Location == "":
		return fmt.Errorf("backfill %q: archive location is required", in.Name)
	case in.Sink == "":
		return fmt.Errorf("backfill %q: sink is required", in.Name)
	case in.Window < 0, in.FilesPerActivity < 0, in.ActivitiesPerRun < 0:
		return fmt.Errorf("backfill %q: window %d, files per activity %d and activities per run %d must not be negative", in.Name, in.Window, in.FilesPerActivity, in.ActivitiesPerRun)
	case in.HeartbeatTimeout < 0:
		// Each replay would fail on the SDK's "negative timeout" instead.
		return fmt.Errorf("backfill %q: heartbeat timeout %v must not be negative (0: 30s)", in.Name, in.HeartbeatTimeout)
	case !in.From.IsZero() && !in.To.IsZero() && !in.From.Before(in.To):
		return fmt.Errorf("backfill %q: time range [%s, %s) is empty", in.Name, in.From.Format(time.RFC3339), in.To.Format(time.RFC3339))
	}
	return nil
}

// BackfillProgress is what the status query returns (the CLI draws its
// progress bar from it) and what the workflow returns. Running names the
// partitions (files, before partition paging) the replays in flight
// replay: each lane's partition and, when small partitions go in batches,
// those its activity replays after it, in order (the activity is in one
// of them).
type BackfillProgress struct {
	Name       string `json:"name"`
	FilesTotal int    `json:"files_total"`
	FilesDone  int    `json:"files_done"`
	// RowsTotal is known when the files were planned with their footers
	// (the workflow before partition paging); else 0 and BytesTotal
	// measures the work. Bytes count each file for the share of its
	// offsets earlier files of its partition do not hold
	// (parquet.FileInfo.NewBytes), so a compaction during the backfill
	// does not count its output's rows again; its output is not the size
	// of its inputs, so BytesDone may end a little off BytesTotal, and
	// FilesDone (the files read) off FilesTotal (the files counted).
	RowsTotal       int64     `json:"rows_total"`
	RowsDone        int64     `json:"rows_done"`
	BytesTotal      int64     `json:"bytes_total,omitempty"`
	BytesDone       int64     `json:"bytes_done,omitempty"`
	PartitionsTotal int       `json:"partitions_total,omitempty"`
	PartitionsDone  int       `json:"partitions_done,omitempty"`
	Written         int64     `json:"written"`
	Skipped         int64     `json:"skipped"`
	Running         []string  `json:"running,omitempty"`
	StartedAt       time.Time `json:"started_at"`
	// Runs counts the workflow's runs (continue-as-new) so far.
	Runs int `json:"runs,omitempty"`
	// RowsPerSecond since the start and the estimated time left (from
	// bytes when the row total is unknown), computed when queried.
	RowsPerSecond float64       `json:"rows_per_second"`
	ETA           time.Duration `json:"eta"`
	Done          bool          `json:"done"`
}

// WithRate returns p with its rate and ETA at now (what QueryStatus
// answers).
func (p BackfillProgress) WithRate(now time.Time) BackfillProgress {
	el := now.Sub(p.StartedAt).Seconds()
	if el <= 0 || p.RowsDone == 0 {
		return p
	}
	p.RowsPerSecond = float64(p.RowsDone) / el
	switch {
	case p.RowsTotal > 0:
		p.ETA = time.Duration(float64(p.RowsTotal-p.RowsDone) / p.RowsPerSecond * float64(time.Second))
	case p.BytesTotal > 0 && p.BytesDone > 0:
		p.ETA = time.Duration(float64(p.BytesTotal-p.BytesDone) / (float64(p.BytesDone) / el) * float64(time.Second))
	}
	p.Running = append([]string(nil), p.Running...)
	return p
}

// BackfillWorkflow replays an archive into a sink, partition by
// partition: it counts the archive (CountArchive: files, bytes,
// partitions; an archive of another schema is refused here with a
// non-retryable error naming both fingerprints), lists partitions a page
// at a time (ListPartitions), and replays up to Window partitions at once,
// each with a chain of ReplayPartition activities that read many files
// apiece, heartbeat their (file, row) and resume from it on retry. Small
// partitions go in batches: one activity replays as many partitions as
// FilesPerActivity holds at the archive's mean files per partition (but
// no more than a fair share of the listed queue among the lanes free), so
// the activities, and the history events, of a backfill of many shards
// of a file or two grow with its files, not its shards. An activity that
// stops at FilesPerActivity puts the partitions of its batch it did not
// start back at the front of the queue, in order, for the next free lane,
// and its lane goes on alone in the partition it stopped in: a big
// partition does not hold small ones behind it while other lanes idle. After
// ActivitiesPerRun activities (or when Temporal suggests it) it stops
// starting replays, lets those in flight finish and continues as new
// with its state (progress, listing cursor, queued partitions, lanes and
// their positions), so history stays small whatever the archive's size.
// It answers QueryStatus with progress and stops on cancellation. Only
// partition names, positions and counts travel through history.
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
	if workflow.GetVersion(ctx, "backfill-partitions", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return backfillFiles(ctx, in)
	}
	if in.FilesPerActivity == 0 {
		in.FilesPerActivity = 256
	}
	if in.ActivitiesPerRun == 0 {
		in.ActivitiesPerRun = 500
	}
	b := &backfill{in: in}
	return b.run(ctx)
}

// backfillFiles is the workflow as it ran before partition paging (one
// listing of every file with its footer, one activity per file); it
// replays histories of backfills started then.
func backfillFiles(ctx workflow.Context, in BackfillInput) (BackfillProgress, error) {
	p := BackfillProgress{Name: in.Name, StartedAt: workflow.Now(ctx)}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (BackfillProgress, error) {
		return p.WithRate(workflow.Now(ctx)), nil
	}); err != nil {
		return p, err
	}

	var a *activities.Backfills
	listCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           in.TaskQueue,
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			MaximumAttempts:        5,
			NonRetryableErrorTypes: backfillNonRetryable,
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

	replayCtx := replayContext(ctx, in)
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

// backfillNonRetryable are the activity errors a retry cannot cure.
var backfillNonRetryable = []string{activities.ErrTypeSchemaMismatch, activities.ErrTypeBadInput, activities.ErrTypeCorrupt}

// replayContext sets the options of replay activities: long, heartbeating,
// retried from their heartbeat, waited for on cancellation.
func replayContext(ctx workflow.Context, in BackfillInput) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           in.TaskQueue,
		StartToCloseTimeout: 6 * time.Hour,
		HeartbeatTimeout:    in.HeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumInterval:        time.Minute,
			NonRetryableErrorTypes: backfillNonRetryable,
		},
	})
}

func remove(xs []string, x string) []string {
	for i, v := range xs {
		if v == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}

// countTimeout bounds a backfill's count of its archive, all attempts
// together: a day, generous for an archive of millions of files on a slow
// store, as long as it heartbeats progress (a stalled one fails after
// activities.CountStallLimit).
const countTimeout = 24 * time.Hour

// backfill is one run of the partition-paged BackfillWorkflow.
type backfill struct {
	in BackfillInput
	st BackfillState
	a  *activities.Backfills

	running  map[string]bool
	batch    bool // small partitions go in batches (see BackfillWorkflow)
	requeue  bool // a lane's partitions not started go back to the queue (see start)
	inFlight int
	started  int // replay activities started in this run
	firstErr error
}

// failure is the error a run ends with when a step failed with err: a
// cancellation, whichever step it reached, carries the progress so far.
func (b *backfill) failure(ctx workflow.Context, err error) error {
	if ctx.Err() != nil {
		return temporal.NewCanceledError(b.st.Progress)
	}
	return err
}

func (b *backfill) run(ctx workflow.Context) (BackfillProgress, error) {
	if b.in.Resume != nil {
		b.st = *b.in.Resume
	} else {
		b.st.Progress = BackfillProgress{Name: b.in.Name, StartedAt: workflow.Now(ctx)}
	}
	b.st.Progress.Runs++
	b.running = map[string]bool{}
	b.batch = workflow.GetVersion(ctx, "backfill-batch-small-partitions", workflow.DefaultVersion, 1) != workflow.DefaultVersion
	b.requeue = workflow.GetVersion(ctx, "backfill-requeue-unstarted-partitions", workflow.DefaultVersion, 1) != workflow.DefaultVersion
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (BackfillProgress, error) {
		return b.st.Progress.WithRate(workflow.Now(ctx)), nil
	}); err != nil {
		return b.st.Progress, err
	}
	// The count and the listing ride out a store outage as the replays
	// do (with 5 attempts, about 15 s of an S3 outage failed a backfill
	// whose replays would have waited), but not for ever: a store still
	// failing after an hour fails the backfill, naming the error (the
	// count has its own bound, below).
	short := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              b.in.TaskQueue,
		StartToCloseTimeout:    10 * time.Minute,
		ScheduleToCloseTimeout: time.Hour,
		HeartbeatTimeout:       time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumInterval:        time.Minute,
			NonRetryableErrorTypes: backfillNonRetryable,
		},
	})
	if b.in.Resume == nil {
		// The count of a huge archive may take hours, its attempts each
		// resuming from the last's heartbeat: the hour above ended it
		// while it still heartbeated progress. It runs up to
		// countTimeout; the heartbeat timeout catches a stuck attempt,
		// and a count that made no progress for activities.CountStallLimit
		// (its attempts hanging or failing) fails, naming the archive.
		opts := workflow.GetActivityOptions(short)
		opts.ScheduleToCloseTimeout = countTimeout
		count := workflow.WithActivityOptions(ctx, opts)
		var t activities.ArchiveTotals
		if err := workflow.ExecuteActivity(count, b.a.CountArchive, activities.CountArchiveInput{
			Location: b.in.Location, ExpectedFingerprint: b.in.ExpectedFingerprint,
		}).Get(ctx, &t); err != nil {
			return b.st.Progress, b.failure(ctx, err)
		}
		b.st.Progress.FilesTotal, b.st.Progress.BytesTotal, b.st.Progress.PartitionsTotal = t.Files, t.Bytes, t.Partitions
	}
	replay := replayContext(ctx, b.in)
	sel := workflow.NewSelector(ctx)
	stopping := false
	for {
		for b.firstErr == nil && ctx.Err() == nil && !stopping && b.inFlight < b.in.Window {
			lane, ok, err := b.nextLane(ctx, short)
			if err != nil {
				// Before, a failed listing (or a cancellation while it
				// ran) returned at once, abandoning the replays in
				// flight: their counts were lost and the status showed
				// them running. Now it is handled as a failed replay:
				// nothing more starts, and those in flight are waited for.
				if workflow.GetVersion(ctx, "backfill-list-failure-waits-for-replays", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
					return b.st.Progress, b.failure(ctx, err)
				}
				if ctx.Err() == nil {
					b.firstErr = fmt.Errorf("list partitions of %s after %q: %w", b.in.Location, b.st.ListedAfter, err)
				}
				break
			}
			if !ok {
				break
			}
			b.start(ctx, replay, sel, lane)
			if b.started >= b.in.ActivitiesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
				stopping = true
			}
		}
		if b.inFlight == 0 {
			break
		}
		sel.Select(ctx)
	}
	if ctx.Err() != nil {
		return b.st.Progress, b.failure(ctx, nil)
	}
	if b.firstErr != nil {
		return b.st.Progress, b.firstErr
	}
	if len(b.st.Lanes) > 0 || len(b.st.Queue) > 0 || !b.st.ListingDone {
		next := b.in
		st := b.st
		next.Resume = &st
		return b.st.Progress, workflow.NewContinueAsNewError(ctx, BackfillWorkflow, next)
	}
	b.st.Progress.Done = true
	return b.st.Progress, nil
}

// nextLane picks the next partition to replay: a lane carried over that
// is not running, else the next queued partition (listing a page when the
// queue is empty). ok is false when there is none.
func (b *backfill) nextLane(ctx, short workflow.Context) (int, bool, error) {
	for i, l := range b.st.Lanes {
		if !b.running[l.Partition] {
			return i, true, nil
		}
	}
	if len(b.st.Queue) == 0 && !b.st.ListingDone {
		var page activities.ListPartitionsResult
		if err := workflow.ExecuteActivity(short, b.a.ListPartitions, activities.ListPartitionsInput{
			Location: b.in.Location, After: b.st.ListedAfter,
		}).Get(ctx, &page); err != nil {
			return 0, false, err
		}
		b.st.Queue = append(b.st.Queue, page.Partitions...)
		if n := len(page.Partitions); n > 0 {
			b.st.ListedAfter = page.Partitions[n-1]
		}
		b.st.ListingDone = !page.More
	}
	if len(b.st.Queue) == 0 {
		return 0, false, nil
	}
	n := min(b.batchSize(), len(b.st.Queue))
	b.st.Lanes = append(b.st.Lanes, BackfillLane{Partition: b.st.Queue[0], Then: slices.Clone(b.st.Queue[1:n])})
	b.st.Queue = b.st.Queue[n:]
	return len(b.st.Lanes) - 1, true, nil
}

// batchSize is how many queued partitions a new lane takes: as many as
// one activity's FilesPerActivity holds at the archive's mean files per
// partition, but no more than an equal share of the queue among the
// lanes not running, so a page of small partitions still spreads over
// the window. 1 before batching (histories of backfills started then).
func (b *backfill) batchSize() int {
	p := b.st.Progress
	if !b.batch || p.PartitionsTotal <= 0 {
		return 1
	}
	mean := max(1, (p.FilesTotal+p.PartitionsTotal-1)/p.PartitionsTotal)
	free := max(1, b.in.Window-b.inFlight)
	return max(1, min(b.in.FilesPerActivity/mean, (len(b.st.Queue)+free-1)/free))
}

// start runs one ReplayPartition activity for lane i.
func (b *backfill) start(ctx, replay workflow.Context, sel workflow.Selector, i int) {
	lane := b.st.Lanes[i]
	fut := workflow.ExecuteActivity(replay, b.a.ReplayPartition, activities.ReplayPartitionInput{
		Location: b.in.Location, Partition: lane.Partition, ExpectedFingerprint: b.in.ExpectedFingerprint,
		Start: lane.Next, Then: lane.Then, From: b.in.From, To: b.in.To, Graph: b.in.Graph, Sink: b.in.Sink,
		MaxFiles: b.in.FilesPerActivity,
	})
	b.inFlight++
	b.started++
	b.running[lane.Partition] = true
	p := &b.st.Progress
	// The status names every partition the activity replays, not only
	// the batch's first (a query result only: no command changes).
	batch := append([]string{lane.Partition}, lane.Then...)
	p.Running = append(p.Running, batch...)
	sel.AddFuture(fut, func(fut workflow.Future) {
		b.inFlight--
		delete(b.running, lane.Partition)
		for _, part := range batch {
			p.Running = remove(p.Running, part)
		}
		var res activities.ReplayPartitionResult
		if err := fut.Get(ctx, &res); err != nil {
			// A replay cancelled with the backfill reports what it had
			// flushed (its result as the cancellation's details): counted,
			// as a result is, so the progress the cancellation carries
			// is not short of whole partitions of a batch.
			var ce *temporal.CanceledError
			if !errors.As(err, &ce) || !ce.HasDetails() || ce.Details(&res) != nil {
				if b.firstErr == nil {
					b.firstErr = fmt.Errorf("replay %s: %w", lane.Partition, err)
				}
				return
			}
			res.Done = false
		}
		p.FilesDone += res.Files
		p.BytesDone += res.Bytes
		p.RowsDone += res.Rows
		p.Written += res.Written
		p.Skipped += res.Skipped
		for j := range b.st.Lanes {
			if b.st.Lanes[j].Partition != lane.Partition {
				continue
			}
			parts := append([]string{lane.Partition}, lane.Then...)
			next := res.Next
			if res.Done && res.Finished < len(parts) {
				// An activity of a build before batching (a worker not
				// yet upgraded, or a user's own) ignores Then and reports
				// Done, without Finished, for its own partition only:
				// taken for the batch, the rest were never replayed.
				res.Finished, next = max(res.Finished, 1), parquet.Position{}
				res.Done = res.Finished == len(parts)
			}
			if res.Done {
				b.st.Lanes = append(b.st.Lanes[:j], b.st.Lanes[j+1:]...)
				p.PartitionsDone += len(parts)
				break
			}
			// The lane goes on in the first partition not finished, from
			// where the activity stopped in it.
			fin := min(max(res.Finished, 0), len(parts)-1)
			p.PartitionsDone += fin
			if !b.requeue {
				// Before, the lane kept the rest of its batch behind the
				// partition it stopped in: a big partition held the small
				// ones after it for its next activities while the other
				// lanes, their queue empty, sat idle.
				b.st.Lanes[j] = BackfillLane{Partition: parts[fin], Next: next, Then: parts[fin+1:]}
				break
			}
			// The partitions it did not start go back to the front of the
			// queue, in order, for the next free lane; the lane goes on
			// alone in the partition it stopped in, or ends when it stopped
			// between partitions.
			rest := parts[fin+1:]
			if next == (parquet.Position{}) {
				rest = parts[fin:]
				b.st.Lanes = append(b.st.Lanes[:j], b.st.Lanes[j+1:]...)
			} else {
				b.st.Lanes[j] = BackfillLane{Partition: parts[fin], Next: next}
			}
			b.st.Queue = append(slices.Clone(rest), b.st.Queue...)
			break
		}
	})
}
