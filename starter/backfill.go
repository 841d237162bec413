package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/portal"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/workflows"
)

func (a *app) backfillCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backfill",
		Short: "Replay a Parquet archive through a graph into a sink",
	}
	cmd.AddCommand(a.backfillStart(), a.backfillStatus(), a.backfillCancel())
	return cmd
}

func (a *app) backfillStart() *cobra.Command {
	var in workflows.BackfillInput
	var from, to string
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a backfill workflow",
		Long: `start runs a BackfillWorkflow: it counts the archive, then replays its
partitions (--window at once), each partition's files in order, many files
per activity, into the sink. The workers serving backfills (a pipeline
worker whose configuration sets backfill.influx_url or
backfill.kafka_brokers, or the demo) must reach the archive and the sink:
file:// folders they share, s3:// buckets as the pipeline's archive sink
reaches them (sinks[].archive.s3) when the location is within its own,
else through the workers' TFLO_S3_* settings. Sinks: ` + worker.SinkExamples + `.`,
		Example: `  starter backfill start --name replay-1 --archive file:///var/tflo/archive --sink influx:iot_portal_replay/autogen --wait
  starter backfill start --name june --archive s3://tflo-archive/prod --sink influx:iot_portal/autogen --from 2026-06-01T00:00:00Z --to 2026-07-01T00:00:00Z
  starter backfill start --name reprocess --archive s3://tflo-archive/prod --sink kafka:signals.replay`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wf.check(cmd); err != nil {
				return err
			}
			var err error
			switch {
			case in.Name == "":
				return usagef("--name is required (it names the backfill for status and cancel)")
			case in.Location == "":
				return usagef("--archive is required: %s", archiveloc.Examples)
			}
			if _, err := archiveloc.Parse(in.Location); err != nil {
				return usageError{err}
			}
			if _, _, err := worker.ParseSink(in.Sink); err != nil {
				return usageError{err}
			}
			if in.From, err = parseTime("--from", from); err != nil {
				return err
			}
			if in.To, err = parseTime("--to", to); err != nil {
				return err
			}
			// The flags by name first; in.Validate names the workflow's fields.
			switch {
			// 0 would reach the workflow as "unset" and run as its
			// default (4 partitions, 256 files), not as given.
			case in.Window < 1:
				return usagef("--window %d must be at least 1", in.Window)
			case in.FilesPerActivity < 1:
				return usagef("--files-per-activity %d must be at least 1", in.FilesPerActivity)
			case !in.From.IsZero() && !in.To.IsZero() && !in.From.Before(in.To):
				return usagef("--from %s is not before --to %s", from, to)
			}
			if err := in.Validate(); err != nil {
				return usageError{err}
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			id := workflows.BackfillWorkflowID(in.Name)
			// A backfill of that name that still runs is an error: starting
			// it again would silently keep the running one, with its own
			// archive, sink and range, and print "started".
			run, err := c.ExecuteWorkflow(cmd.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue,
				WorkflowExecutionErrorWhenAlreadyStarted: true}, workflows.BackfillWorkflow, in)
			if err != nil {
				var running *serviceerror.WorkflowExecutionAlreadyStarted
				if errors.As(err, &running) {
					return fmt.Errorf("backfill %q is already running (workflow %s): follow it with starter backfill status --name %s --wait, or stop it with starter backfill cancel --name %s", in.Name, id, in.Name, in.Name)
				}
				return fmt.Errorf("start backfill %q: %w", in.Name, err)
			}
			if !wf.wait {
				return a.emit(map[string]string{"workflow_id": id, "run_id": run.GetRunID()}, func(w io.Writer) {
					printf(w, "backfill %s started (workflow %s); follow it with: starter backfill status --name %s --wait\n", in.Name, id, in.Name)
				})
			}
			return a.watchBackfill(cmd.Context(), c, in.Name, &wf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Name, "name", "", "backfill name (required)")
	f.StringVar(&in.Location, "archive", "", "archive location: "+archiveloc.Examples+" (required)")
	f.StringVar(&in.Sink, "sink", worker.InfluxSinkName(portal.Bucket(portal.Database+"_replay")), "where to write: "+worker.SinkExamples)
	f.StringVar(&in.Graph, "graph", "", "replay graph a worker of your own registered (activities.Backfills.Graphs; tflo's workers register none, and fail the replay with \"no graphs registered\"), with --task-queue (default: write archived signals as they are)")
	f.StringVar(&in.ExpectedFingerprint, "fingerprint", "", "expected archive schema fingerprint (default: this build's)")
	f.StringVar(&from, "from", "", "only rows at or after this time (RFC 3339)")
	f.StringVar(&to, "to", "", "only rows before this time (RFC 3339)")
	f.IntVar(&in.Window, "window", 4, "partitions replayed at once")
	f.IntVar(&in.FilesPerActivity, "files-per-activity", 256, "files one replay activity reads before the next takes over (when the archive's shards average at most half of it, several go to an activity: the batch is sized by the average, not by each shard)")
	f.StringVar(&in.TaskQueue, "task-queue", workflows.BackfillTaskQueue, "task queue of the replay activities (tflo's workers serve only "+workflows.BackfillTaskQueue+"; another needs a worker of your own that registers the backfill activities, or the replays wait for ever)")
	wf.add(cmd, "until the backfill ends, showing its progress", 0)
	return cmd
}

func parseTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef("%s %q: want RFC 3339, like 2026-06-01T00:00:00Z", flag, v)
	}
	return t, nil
}

func (a *app) backfillStatus() *cobra.Command {
	var name string
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a backfill's progress (files and rows done, rate, ETA)",
		Long: `Show a backfill's progress: files and rows done, rate, ETA and how it
stands (running, completed, failed, canceled, ...). Without --wait, a
running backfill's replays follow, one line each, from their last
heartbeat: the partition each is in, at which file and row (or that it is
finishing, its batch replayed to its end, or stopping at its
--files-per-activity limit, and where the next activity goes on), and what
it flushed; one whose attempt failed says it waits to retry, when the next
attempt is due and the failure, also one that failed before its first
heartbeat (as each does while the sink is down), where it starts (-o json:
"replaying"); before any heartbeated, the partitions in flight. With --wait, redraw
the progress line until the backfill ends; a backfill that ended other
than completed exits 1 with its error. With no control worker polling
task queue tflo-control (nothing would answer its status query), a
running backfill exits 1 at once, saying so, and an ended one shows how
it ended, without progress.

Exit code 3: no backfill has that --name.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wf.check(cmd); err != nil {
				return err
			}
			if name == "" {
				return usagef("--name is required")
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			return a.watchBackfill(cmd.Context(), c, name, &wf)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "backfill name")
	wf.add(cmd, "until the backfill ends, redrawing its progress", 0)
	cmd.Flags().BoolVar(&wf.wait, "watch", false, "same as --wait")
	_ = cmd.Flags().MarkDeprecated("watch", "use --wait")
	return cmd
}

func (a *app) backfillCancel() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Cancel a running backfill (replays in flight stop at their next heartbeat)",
		Long: `Cancel a running backfill: the replays in flight learn of it with their
next heartbeat, within the replay's heartbeat timeout (30 s by default),
and stop.

The command returns once the server has the request; it prints
"cancellation requested" (-o json: {"cancel_requested": workflow id}).
"starter backfill status --name NAME --wait" shows when the backfill ended.

Exit code 3: no backfill has that --name, or it ended already.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usagef("--name is required")
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			id := workflows.BackfillWorkflowID(name)
			// The server accepts a cancellation of a closed workflow: ask
			// how the backfill stands first, so one that ended is not
			// reported cancelled.
			desc, err := c.DescribeWorkflow(cmd.Context(), id, "")
			if err != nil {
				var nf *serviceerror.NotFound
				if errors.As(err, &nf) {
					return notFoundError{fmt.Errorf("no backfill named %q", name)}
				}
				return fmt.Errorf("cancel backfill %q: %w", name, err)
			}
			if st := desc.Status; st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return notFoundError{fmt.Errorf("backfill %q is not running (it is %s): nothing to cancel", name, executionStatus(st))}
			}
			if err := c.CancelWorkflow(cmd.Context(), id, ""); err != nil {
				var nf *serviceerror.NotFound
				if errors.As(err, &nf) {
					return notFoundError{fmt.Errorf("no backfill named %q", name)}
				}
				return fmt.Errorf("cancel backfill %q: %w", name, err)
			}
			// Requested, not done: the workflow stops its replays and ends
			// when a control worker runs it (status --wait shows the end).
			return a.emit(map[string]string{"cancel_requested": id}, func(w io.Writer) {
				printf(w, "backfill %s: cancellation requested; replays in flight stop at their next heartbeat (starter backfill status --name %s --wait shows the end)\n", name, name)
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "backfill name")
	return cmd
}

// watchBackfill prints the backfill's progress once, or, with --wait,
// redraws it until the workflow closes, then reports how it ended.
func (a *app) watchBackfill(ctx context.Context, c client.Client, name string, wf *waitFlags) error {
	id := workflows.BackfillWorkflowID(name)
	wctx, cancel := wf.context(ctx)
	defer cancel()
	tty := isTerminal(a.out)
	var lastLine string
	var lastPrint time.Time
	// Without a control worker the status query waits ~10s and fails, and
	// an ended backfill then read as one no worker ever ran: ask only the
	// server how it stands.
	noWorker := noControlWorker(wctx, c, fmt.Sprintf("backfill %q (workflow %s) runs, but no worker answers its status query", name, id))
	for {
		// wctx: --timeout bounds the calls too, not only the waits between.
		var p workflows.BackfillProgress
		qerr := noWorker
		var waited time.Duration
		if noWorker == nil {
			asked := time.Now()
			p, qerr = queryBackfill(wctx, c, id)
			waited = time.Since(asked)
		}
		if qerr != nil {
			var nf *serviceerror.NotFound
			switch {
			case errors.As(qerr, &nf):
				return notFoundError{fmt.Errorf("no backfill named %q", name)}
			case ctx.Err() != nil:
				return ctx.Err()
			case wf.expired(ctx, wctx, qerr):
				return fmt.Errorf("backfill %q: no answer within --timeout %s: %w", name, wf.timeout, qerr)
			}
		}
		desc, err := c.DescribeWorkflow(wctx, id, "")
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return notFoundError{fmt.Errorf("no backfill named %q", name)}
			}
			if wf.expired(ctx, wctx, err) {
				return fmt.Errorf("backfill %q: no answer within --timeout %s: %w", name, wf.timeout, err)
			}
			if qerr != nil {
				return fmt.Errorf("query backfill %q (workflow %s): %w%s", name, id, qerr, noWorkerHint(wctx, c, qerr, waited))
			}
			return fmt.Errorf("describe backfill %q: %w", name, err)
		}
		st := desc.RawResponse.GetWorkflowExecutionInfo().GetStatus()
		status := executionStatus(st)
		closed := st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		if noWorker != nil && !closed {
			return noWorker
		}
		if qerr != nil && !closed {
			return fmt.Errorf("query backfill %q (workflow %s): %w%s", name, id, qerr, noWorkerHint(wctx, c, qerr, waited))
		}
		// A backfill that ended before any worker ran it (terminated, or
		// timed out, waiting) answers no query (the server says it is not
		// ready): it has no progress to show, only how it ended.
		var notReady *serviceerror.WorkflowNotReady
		neverRan := errors.As(qerr, &notReady)
		// Where the replays in flight stand, from their last heartbeats
		// (the workflow sees none: its Running names whole batches).
		var reps []replay
		waiting := 0
		if qerr == nil && !closed {
			reps, waiting = replaysInFlight(desc.RawResponse.GetPendingActivities(), p.Running)
			placeFromInputs(wctx, c, id, desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId(), reps)
		}
		if a.structured() {
			if !wf.wait || closed {
				var progress any = p
				if qerr != nil {
					progress = nil // no answer: null, not a progress of zeros
				}
				out := map[string]any{"name": name, "status": status, "progress": progress}
				if len(reps) > 0 {
					out["replaying"] = reps
				}
				if err := a.emit(out, nil); err != nil {
					return err
				}
			}
		} else {
			line := progressLine(p) + "  " + status
			switch {
			case noWorker != nil:
				line = status + " (no control worker polls task queue " + workflows.ControlTaskQueue + " to answer its status query: no progress to show)"
			case neverRan:
				line = status + " (no worker ran it: no progress was recorded)"
			case qerr != nil:
				// A control worker polls (or the check failed: then that
				// is said, with its error), but the query was not
				// answered: say that, not that no worker ran the backfill.
				line = status + " (" + unansweredQuery(wctx, c, qerr, waited) + ")"
			}
			switch {
			case wf.wait && !closed && tty:
				printf(a.out, "\r%s", line)
			case wf.wait && !closed:
				// Not a terminal (a log, a pipe): a line when something
				// moved, at most every few seconds.
				if line != lastLine && time.Since(lastPrint) >= plainInterval {
					printf(a.out, "%s\n", line)
					lastLine, lastPrint = line, time.Now()
				}
			case tty:
				printf(a.out, "\r%s\n", line)
			default:
				printf(a.out, "%s\n", line)
			}
			if !wf.wait {
				printReplays(a.out, reps, waiting, p.Running)
			}
		}
		if !wf.wait || closed {
			if closed && st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				// Fetch the failure to show why.
				err := c.GetWorkflow(ctx, id, "").Get(ctx, nil)
				return fmt.Errorf("backfill %q %s: %v", name, status, err)
			}
			return nil
		}
		select {
		case <-wctx.Done():
			if tty && !a.structured() {
				printf(a.out, "\n")
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("backfill %q did not end within --timeout %s (it goes on: starter backfill status --name %s)", name, wf.timeout, name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// noWorkerHint explains err, a query that timed out on the server after
// waited, by what is known of the workers on the control task queue: none
// polls it (start one), one polls but did not answer in time (it is busy
// or stuck: its logs say why), or the check failed (so it is not known).
// It is "" for any other error.
func noWorkerHint(ctx context.Context, c client.Client, err error, waited time.Duration) string {
	if !timedOutOnServer(err) {
		return ""
	}
	q := workflows.ControlTaskQueue
	pollers, perr := controlPollers(ctx, c)
	switch {
	case perr != nil:
		return fmt.Sprintf(" (no worker answered within %s, and whether one polls task queue %s is not known: %v)", waited.Round(time.Second), q, perr)
	case len(pollers) == 0:
		return fmt.Sprintf(" (no worker answered: is a worker with control_worker: true, or the demo, running tflo's workflows on task queue %s?)", q)
	}
	return fmt.Sprintf(" (a worker polls task queue %s (%s) but did not answer within %s: it may be busy or stuck; see that worker's logs)",
		q, pollerNames(pollers), waited.Round(time.Second))
}

// pollerNames lists the identities of pollers, the first few of them.
func pollerNames(pollers []*taskqueuepb.PollerInfo) string {
	const most = 3
	names := make([]string, 0, most)
	for _, p := range pollers[:min(len(pollers), most)] {
		names = append(names, p.GetIdentity())
	}
	s := strings.Join(names, ", ")
	if len(pollers) > most {
		s += fmt.Sprintf(" and %d more", len(pollers)-most)
	}
	return s
}

// unansweredQuery says what is known of a status query of a closed
// backfill that failed after waited, and that there is no progress to
// show: it timed out (no worker on the control task queue answered it
// within waited; and when the check of that queue's pollers fails, that
// whether one polls is not known, with the check's error), or it failed
// with an error of its own.
func unansweredQuery(ctx context.Context, c client.Client, err error, waited time.Duration) string {
	q := workflows.ControlTaskQueue
	if !timedOutOnServer(err) {
		return fmt.Sprintf("its status query on task queue %s failed: %v: no progress to show", q, err)
	}
	s := fmt.Sprintf("its status query, on task queue %s, was not answered within %s: no progress to show", q, waited.Round(time.Second))
	if _, perr := controlPollers(ctx, c); perr != nil {
		s += fmt.Sprintf("; whether a worker polls task queue %s is not known: %v", q, perr)
	}
	return s
}

// noControlWorker returns an error saying what is missing when no worker
// polls the control task queue: tflo's workflows then take no step and
// answer no query or update, which would otherwise only time out. It
// returns nil when one polls, or when the check itself fails (the call
// that follows reports the problem).
func noControlWorker(ctx context.Context, c client.Client, what string) error {
	pollers, err := controlPollers(ctx, c)
	if err != nil || len(pollers) > 0 {
		return nil
	}
	return fmt.Errorf("%s: no control worker polls task queue %s, so nothing runs tflo's workflows: start a worker with control_worker: true (TFLO_CONTROL_WORKER=true), or starter demo",
		what, workflows.ControlTaskQueue)
}

// controlPollers returns the workers polling the control task queue for
// workflow tasks (the steps, queries and updates of tflo's workflows).
func controlPollers(ctx context.Context, c client.Client) ([]*taskqueuepb.PollerInfo, error) {
	resp, err := c.DescribeTaskQueue(ctx, workflows.ControlTaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return nil, fmt.Errorf("describe task queue %s: %w", workflows.ControlTaskQueue, err)
	}
	return resp.GetPollers(), nil
}

// timedOutOnServer tells a call the server ended for running out of time.
func timedOutOnServer(err error) bool {
	var de *serviceerror.DeadlineExceeded
	var ce *serviceerror.Canceled
	return errors.As(err, &de) || errors.As(err, &ce)
}

func queryBackfill(ctx context.Context, c client.Client, id string) (workflows.BackfillProgress, error) {
	var p workflows.BackfillProgress
	v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if err != nil {
		return p, err
	}
	return p, v.Get(&p)
}

// progressLine draws "[#######-----]  58%  files 7/12  rows 5800/10000  1200 rows/s  ETA 3s"
// (rows without a total, and bytes, when the workflow measures the work in
// bytes).
func progressLine(p workflows.BackfillProgress) string {
	const width = 30
	frac := 0.0
	switch {
	case p.Done:
		frac = 1
	case p.RowsTotal > 0:
		frac = float64(p.RowsDone) / float64(p.RowsTotal)
	case p.BytesTotal > 0:
		frac = float64(p.BytesDone) / float64(p.BytesTotal)
	case p.FilesTotal > 0:
		frac = float64(p.FilesDone) / float64(p.FilesTotal)
	}
	frac = min(max(frac, 0), 1)
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
	eta := "-"
	if p.ETA > 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	rows := fmt.Sprintf("rows %d", p.RowsDone)
	if p.RowsTotal > 0 {
		rows += fmt.Sprintf("/%d", p.RowsTotal)
	}
	if p.BytesTotal > 0 {
		rows += "  " + bytesString(p.BytesDone) + "/" + bytesString(p.BytesTotal)
	}
	return fmt.Sprintf("[%s] %3.0f%%  files %d/%d  %s  %.0f rows/s  ETA %s",
		bar, frac*100, p.FilesDone, p.FilesTotal, rows, p.RowsPerSecond, eta)
}

// replay is where one replay activity in flight stands, as its last
// heartbeat has it (one whose retry waits with no heartbeat: where its
// input starts it, when placeFromInputs found it, else its activity id,
// attempt and failure only).
type replay struct {
	// ActivityID is the activity's id in the backfill's run.
	ActivityID string `json:"activity_id"`
	// Partition is the partition it is in now (for a backfill started
	// before partition paging, the file it replays); "" when the status
	// query's Running does not say which (Batch and Finished then do).
	Partition string `json:"partition"`
	// Batch is the first partition of the batch the activity replays,
	// BatchSize how many partitions the batch has (0: not known, from
	// the heartbeat of a build before it), Finished how many of them it
	// replayed to their end: all of them (Partition "") while the
	// activity finishes, or waits to retry, after its batch's end.
	Batch     string `json:"batch,omitempty"`
	BatchSize int    `json:"batch_size,omitempty"`
	Finished  int    `json:"finished"`
	// Stopping: the activity read its files-per-activity and is
	// completing (or its retry completes at once); Partition, File and
	// Row are where the next activity of its lane goes on, not where it
	// replays.
	Stopping bool `json:"stopping,omitempty"`
	// File and Row: where in Partition its flushed rows end ("" and 0:
	// at the partition's start).
	File string `json:"file,omitempty"`
	Row  int64  `json:"row"`
	// Files, Rows and Written: what the activity flushed so far, over
	// its attempts.
	Files         int       `json:"files"`
	Rows          int64     `json:"rows"`
	Written       int64     `json:"written"`
	Attempt       int32     `json:"attempt"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// Retrying: an attempt failed (or its worker died) and attempt
	// Attempt waits to start, at NextAttempt when the server says;
	// LastFailure is the failed attempt's message.
	Retrying    bool      `json:"retrying,omitempty"`
	NextAttempt time.Time `json:"next_attempt"`
	LastFailure string    `json:"last_failure,omitempty"`
	// undecoded: its heartbeat details did not decode (a build's of
	// another shape): where it stands is not known, not its input's start.
	undecoded bool
}

// replaysInFlight reads, from a backfill's pending activities, where each
// replay activity that heartbeated stands: ReplayPartition heartbeats its
// result so far (the batch's first partition and size, how many of the
// batch it finished, its position in the next), and running, the status
// query's partitions in flight (each batch's in order), names the one it
// is in (none once it finished them all: the next in running is another
// batch's);
// ReplayFile heartbeats its file's position. A replay whose retry waits
// is among reps with no heartbeat too (its attempt failed before the
// first, as each does while the sink is down): its failure is the reason
// the backfill stands still. waiting counts the other replay activities
// with no heartbeat (or one that does not decode).
func replaysInFlight(pending []*workflowpb.PendingActivityInfo, running []string) (reps []replay, waiting int) {
	for _, pa := range pending {
		typ := pa.GetActivityType().GetName()
		if typ != "ReplayPartition" && typ != "ReplayFile" {
			continue
		}
		r := replay{ActivityID: pa.GetActivityId(), Attempt: pa.GetAttempt()}
		if t := pa.GetLastHeartbeatTime(); t != nil {
			r.LastHeartbeat = t.AsTime()
		}
		if pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED && pa.GetAttempt() > 1 {
			r.Retrying, r.LastFailure = true, pa.GetLastFailure().GetMessage()
			if t := pa.GetNextAttemptScheduleTime(); t != nil {
				r.NextAttempt = t.AsTime()
			}
		}
		if !r.readHeartbeat(typ, pa.GetHeartbeatDetails(), running) {
			r.undecoded = pa.GetHeartbeatDetails() != nil
			if !r.Retrying {
				waiting++
				continue
			}
		}
		reps = append(reps, r)
	}
	return reps, waiting
}

// readHeartbeat sets where r stands from the heartbeat details hb of its
// activity, of type typ (ReplayPartition or ReplayFile), and tells
// whether they said (false: none, or ones that do not decode).
func (r *replay) readHeartbeat(typ string, hb *commonpb.Payloads, running []string) bool {
	if hb == nil {
		return false
	}
	dc := converter.GetDefaultDataConverter()
	if typ == "ReplayFile" {
		var fp activities.ReplayFileProgress
		if dc.FromPayloads(hb, &fp) != nil || fp.File == "" {
			return false
		}
		r.Partition, r.Row, r.Rows, r.Written = fp.File, fp.Row, fp.Rows, fp.Written
		return true
	}
	var pr activities.ReplayPartitionResult
	if dc.FromPayloads(hb, &pr) != nil || pr.Partition == "" {
		return false
	}
	r.Batch, r.BatchSize, r.Finished, r.Stopping = pr.Partition, pr.BatchSize, pr.Finished, pr.Stopping
	r.File, r.Row, r.Files, r.Rows, r.Written = pr.Next.File, pr.Next.Row, pr.Files, pr.Rows, pr.Written
	switch i := slices.Index(running, pr.Partition); {
	case r.finishing():
	case pr.Finished == 0:
		r.Partition = pr.Partition
	case i >= 0 && i+pr.Finished < len(running):
		r.Partition = running[i+pr.Finished]
	}
	return true
}

// placed tells a replay whose heartbeat, or input, says where it stands
// (every one read from either names its batch or its file).
func (r replay) placed() bool {
	return r.Batch != "" || r.Partition != ""
}

// placeFromInputs places each replay of reps that no heartbeat placed
// (one whose retry waits, its attempts failing before their first
// heartbeat) where its input starts it, which the history of backfill
// run (id, runID) has, in the event that scheduled it. It reads the
// history only when there is such a replay, and no further than the
// last one's; one it cannot read leaves them named by their activity id.
func placeFromInputs(ctx context.Context, c client.Client, id, runID string, reps []replay) {
	unplaced := map[string]int{}
	for i, r := range reps {
		if !r.placed() && !r.undecoded && r.ActivityID != "" {
			unplaced[r.ActivityID] = i
		}
	}
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for len(unplaced) > 0 && it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		i, ok := unplaced[a.GetActivityId()]
		if !ok {
			continue
		}
		delete(unplaced, a.GetActivityId())
		reps[i].readInput(a.GetActivityType().GetName(), a.GetInput())
	}
}

// readInput places r, a replay with no heartbeat, where its input (of an
// activity of type typ) starts it: a ReplayPartition at its batch's
// first partition, from its start position; a ReplayFile at its file's
// start. Input that does not decode leaves r as it is.
func (r *replay) readInput(typ string, input *commonpb.Payloads) {
	dc := converter.GetDefaultDataConverter()
	if typ == "ReplayFile" {
		var in activities.ReplayFileInput
		if dc.FromPayloads(input, &in) == nil {
			r.Partition = in.File
		}
		return
	}
	var in activities.ReplayPartitionInput
	if dc.FromPayloads(input, &in) != nil || in.Partition == "" {
		return
	}
	r.Partition, r.Batch, r.BatchSize = in.Partition, in.Partition, 1+len(in.Then)
	r.File, r.Row = in.Start.File, in.Start.Row
}

// finishing tells a replay that replayed every partition of its batch
// (it is completing, or its worker died then and a retry completes it).
func (r replay) finishing() bool {
	return r.BatchSize > 0 && r.Finished >= r.BatchSize
}

// printReplays writes, under a running backfill's progress line, a line
// per replay in flight that heartbeated: the partition (or file) it is in
// and where (or that it is finishing, its batch replayed to its end, or
// stopping at its files-per-activity limit, and where the next activity
// goes on), and what it flushed; one whose retry waits says so, with
// when its next attempt is due and its last failure (shortened to a
// line). When none
// heartbeated, it names the partitions in flight (running) instead, as
// the status query has them. A replay whose retry waits, not placed by a
// heartbeat or its input, is named by its activity id, with its attempt
// and failure.
func printReplays(w io.Writer, reps []replay, waiting int, running []string) {
	placed := slices.ContainsFunc(reps, replay.placed)
	if !placed && len(running) > 0 {
		printf(w, "  in flight (no replay has heartbeated yet): %s\n", strings.Join(running, ", "))
	}
	for _, r := range reps {
		attempt, failure := r.attempt()
		if !r.placed() {
			printf(w, "  waiting to retry replay activity %s (%s, no heartbeat yet%s)\n", cell(r.ActivityID), attempt, failure)
			continue
		}
		verb, what := "replaying", r.Partition
		switch {
		case r.finishing() && r.BatchSize == 1:
			verb, what = "finishing", r.Batch+", replayed to its end"
		case r.finishing():
			verb, what = "finishing", fmt.Sprintf("the batch of %d partitions beginning with %s, all replayed", r.BatchSize, r.Batch)
		case r.Partition == "":
			what = fmt.Sprintf("partition %d of the batch beginning with %s", r.Finished+1, r.Batch)
		}
		switch {
		case r.finishing():
		case r.File != "" && r.File != r.Partition:
			what += fmt.Sprintf(" at file %s row %d", r.File, r.Row)
		case r.Row > 0:
			what += fmt.Sprintf(" at row %d", r.Row)
		default:
			what += ", at its start"
		}
		stopping := r.Stopping && !r.finishing()
		if stopping {
			// It replays no more: what follows is the next activity's.
			verb, what = "stopping", "at its files-per-activity limit; the next activity goes on in "+what
		}
		flushed := fmt.Sprintf("%d rows", r.Rows)
		if r.Batch != "" {
			flushed = fmt.Sprintf("%d files, %d rows", r.Files, r.Rows)
		}
		switch {
		case r.Retrying && stopping:
			verb = "waiting to retry, stopping"
		case r.Retrying:
			verb = "waiting to retry"
		}
		printf(w, "  %s %s (this activity flushed %s; %s, last heartbeat %s%s)\n",
			verb, what, flushed, attempt, cell(age(r.LastHeartbeat)), failure)
	}
	switch {
	case !placed:
	case waiting == 1:
		printf(w, "  and 1 replay with no heartbeat yet\n")
	case waiting > 1:
		printf(w, "  and %d replays with no heartbeat yet\n", waiting)
	}
}

// attempt says which attempt r is in ("attempt 3") and, when its retry
// waits, when that attempt is due ("attempt 3 in 8s", "attempt 3 due
// since 2m0s"), with failure its last failure on one line ("; last
// failure: ...", "" when it does not wait).
func (r replay) attempt() (attempt, failure string) {
	attempt = fmt.Sprintf("attempt %d", r.Attempt)
	if !r.Retrying {
		return attempt, ""
	}
	switch until := time.Until(r.NextAttempt); {
	case r.NextAttempt.IsZero():
	case until > 0:
		attempt += " in " + shortDuration(until)
	default:
		// Due, and no worker took it: none polls, or all are busy.
		attempt += " due since " + shortDuration(-until)
	}
	return attempt, "; last failure: " + cell(oneLine(r.LastFailure, 100))
}

// plainInterval is how often a watched backfill prints a progress line
// when the output is not a terminal.
const plainInterval = 5 * time.Second

// isTerminal reports whether w is a terminal (a character device), where
// a progress line can be redrawn in place with \r.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
