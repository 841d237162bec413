package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

func (a *app) pipelineCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "Start, stop and inspect a pipeline's checkpoint coordinator",
	}
	cmd.AddCommand(a.pipelineStart(), a.pipelineStop(), a.pipelineStatus())
	return cmd
}

func (a *app) pipelineStart() *cobra.Command {
	var pipeline string
	var interval, coolDown, maxAge time.Duration
	var threshold int
	var manual bool
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start (or keep) the checkpoint coordinator of a pipeline",
		Long: `Start the pipeline's checkpoint coordinator. Starting is idempotent: a
coordinator that already runs keeps running with its own settings (the
settings given here that it does not take are named on stderr). Workers
start it themselves with their pipeline's checkpoint settings when they
announce their first shards; this command starts it ahead of them, with
these settings. The coordinator learns the shards from the workers.`,
		Example: "  starter pipeline start --pipeline iot-portal --interval 10s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct {
				flag           string
				negative, zero bool
			}{{"--interval", interval < 0, interval == 0}, {"--breaker-threshold", threshold < 0, threshold == 0}, {"--breaker-cool-down", coolDown < 0, coolDown == 0}, {"--max-checkpoint-age", maxAge < 0, false}} {
				if f.negative {
					return usagef("%s %s must not be negative", f.flag, cmd.Flags().Lookup(f.flag[2:]).Value)
				}
				// The coordinator takes a zero for its default: a 0 given
				// here would silently become 10s, 3 or 1m.
				if f.zero {
					return usagef("%s %s must be positive (its default is %s)", f.flag, cmd.Flags().Lookup(f.flag[2:]).Value, cmd.Flags().Lookup(f.flag[2:]).DefValue)
				}
			}
			in := workflows.CoordinatorInput{Pipeline: pipeline, Interval: activities.Duration(interval), Manual: manual,
				BreakerThreshold: threshold, BreakerCoolDown: activities.Duration(coolDown), MaxCheckpointAge: activities.Duration(maxAge)}
			if err := in.Validate(); err != nil {
				return usageError{err}
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			// Refused rather than kept silently, so that settings given
			// here and not applied are reported.
			opts := workflows.CoordinatorStartOptions(in)
			opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
			opts.WorkflowExecutionErrorWhenAlreadyStarted = true
			id, runID := opts.ID, ""
			run, err := c.ExecuteWorkflow(cmd.Context(), opts, workflows.CoordinatorWorkflow, in)
			var running *serviceerror.WorkflowExecutionAlreadyStarted
			switch {
			case errors.As(err, &running):
				runID = running.RunId
				var kept []string
				for _, name := range []string{"interval", "manual", "breaker-threshold", "breaker-cool-down", "max-checkpoint-age"} {
					if fl := cmd.Flags().Lookup(name); fl.Changed {
						kept = append(kept, "--"+name+" "+fl.Value.String())
					}
				}
				if len(kept) > 0 {
					fmt.Fprintf(a.errOut, "not applied: %s: the checkpoint coordinator %s already runs and keeps its own settings (starter pipeline stop ends it)\n", strings.Join(kept, ", "), id)
				}
			case err != nil:
				return fmt.Errorf("start the checkpoint coordinator of %q: %w%s", pipeline, err, a.searchAttributeHint(err))
			default:
				runID = run.GetRunID()
			}
			out := map[string]string{"pipeline": pipeline, "workflow_id": id, "run_id": runID}
			return a.emit(out, func(w io.Writer) {
				printf(w, "checkpoint coordinator %s running (pipeline %s)\n", id, pipeline)
			})
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	cmd.Flags().DurationVar(&interval, "interval", 10*time.Second, "time between checkpoint rounds")
	cmd.Flags().BoolVar(&manual, "manual", false, "run rounds only when asked (checkpoint now)")
	cmd.Flags().IntVar(&threshold, "breaker-threshold", 3, "consecutive rounds with storage failures that open the breaker")
	cmd.Flags().DurationVar(&coolDown, "breaker-cool-down", time.Minute, "how long an open breaker holds rounds off")
	cmd.Flags().DurationVar(&maxAge, "max-checkpoint-age", 0, "how long a worker goes without a round before it checkpoints on its own (default 3 intervals)")
	return cmd
}

// coordinatorRuns lists the checkpoint coordinators of a pipeline through
// the visibility API (search attribute TfloPipeline).
func (a *app) coordinatorRuns(ctx context.Context, c client.Client, pipeline string, runningOnly bool) ([]*workflowExecution, error) {
	q := fmt.Sprintf("WorkflowType = 'CoordinatorWorkflow' AND %s = %s", workflows.SearchPipeline.GetName(), quote(pipeline))
	if runningOnly {
		q += " AND ExecutionStatus = 'Running'"
	}
	var out []*workflowExecution
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list the checkpoint coordinators of pipeline %q: %w%s", pipeline, err, a.searchAttributeHint(err))
		}
		for _, e := range resp.Executions {
			out = append(out, newExecution(e))
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			return out, nil
		}
	}
}

func (a *app) pipelineStop() *cobra.Command {
	var pipeline string
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Ask the pipeline's checkpoint coordinator to finish",
		Long: `Ask the pipeline's checkpoint coordinator to finish: a round in flight is
cut short (shards that committed stay committed) and it ends with its
final state. Workers go on checkpointing on their own and start a new
coordinator when they announce their shards again.

Exit code 3: the pipeline runs no checkpoint coordinator.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			running, err := workflows.CoordinatorRunning(cmd.Context(), c, pipeline)
			if err != nil {
				return err
			}
			if !running {
				return notFoundError{fmt.Errorf("pipeline %q runs no checkpoint coordinator", pipeline)}
			}
			id := workflows.CoordinatorWorkflowID(pipeline)
			if err := c.SignalWorkflow(cmd.Context(), id, "", workflows.SignalStop, workflows.StopRequest{Reason: "starter pipeline stop"}); err != nil {
				return fmt.Errorf("stop %s: %w", id, err)
			}
			return a.emit(map[string]any{"pipeline": pipeline, "stopped": id}, func(w io.Writer) {
				printf(w, "asked the checkpoint coordinator of %s (%s) to stop\n", pipeline, id)
			})
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	return cmd
}

func (a *app) pipelineStatus() *cobra.Command {
	var pipeline string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each shard's owner, status and last checkpoint",
		Long: `Show the per-shard table of the pipeline's checkpoint coordinator: the
shard, its owner and epoch, its status in the last round, the round and
checkpoint (id, cursor, age, duration, bytes) that last committed it, the
checkpoints its owners took on their own (LOCAL) and the last error.
The table is read 1,000 shards at a time (the coordinator's shards-page
query); a coordinator of an earlier build is asked its shards query, the
whole table, which Temporal refuses past some 4,600 shards. A pipeline
without a running coordinator prints an empty table ([] under -o json)
and exits 0. A running coordinator with no control worker polling task
queue tflo-control (nothing would answer its shards query) exits 1 at
once, saying so.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			rows, err := coordinatorShards(cmd.Context(), c, pipeline)
			if err != nil {
				return err
			}
			t := shardsTable(rows)
			t.empty = fmt.Sprintf("pipeline %q runs no checkpoint coordinator, or no worker has announced a shard yet (workers start it; or: starter pipeline start)", pipeline)
			return a.emitTable(rows, t)
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	return cmd
}

// coordinatorShards returns the coordinator's per-shard table (empty when
// no coordinator runs), a page at a time (QueryShardsPage): the whole
// table in one answer (QueryShards) is refused past 2 MB, some 4,600
// shards. A coordinator of an earlier build, which knows no page query,
// is asked for the whole table.
func coordinatorShards(ctx context.Context, c client.Client, pipeline string) ([]workflows.ShardRow, error) {
	rows := []workflows.ShardRow{}
	id := workflows.CoordinatorWorkflowID(pipeline)
	running, err := workflows.CoordinatorRunning(ctx, c, pipeline)
	if err != nil || !running {
		return rows, err
	}
	// Without one the query waits ~10s, then fails with the server's
	// deadline error.
	if err := noControlWorker(ctx, c, fmt.Sprintf("checkpoint coordinator %s runs, but no worker answers its shards query", id)); err != nil {
		return nil, err
	}
	var after streaming.ShardID
	for {
		asked := time.Now()
		v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryShardsPage, workflows.ShardsPageRequest{After: after})
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return []workflows.ShardRow{}, nil // ended since
			}
			if after == "" && unknownQuery(err) {
				return wholeCoordinatorTable(ctx, c, id)
			}
			return nil, fmt.Errorf("query %s%s: %w%s", id, pageAfter(after), err, noWorkerHint(ctx, c, err, time.Since(asked)))
		}
		var page workflows.ShardsPage
		if err := v.Get(&page); err != nil {
			return nil, fmt.Errorf("decode the shards of %s%s: %w", id, pageAfter(after), err)
		}
		rows = append(rows, page.Rows...)
		if !page.More || len(page.Rows) == 0 {
			return rows, nil
		}
		after = page.Rows[len(page.Rows)-1].Shard
	}
}

// pageAfter names the page of the per-shard table after shard, but the
// first.
func pageAfter(shard streaming.ShardID) string {
	if shard == "" {
		return ""
	}
	return fmt.Sprintf(" (page after shard %s)", shard)
}

// unknownQuery says whether err is a workflow's answer that it has no
// handler of the query (the SDK's "unknown queryType").
func unknownQuery(err error) bool {
	var qf *serviceerror.QueryFailed
	return errors.As(err, &qf) && strings.Contains(qf.Message, "unknown queryType")
}

// wholeCoordinatorTable returns the per-shard table of coordinator id of
// an earlier build in one answer (QueryShards).
func wholeCoordinatorTable(ctx context.Context, c client.Client, id string) ([]workflows.ShardRow, error) {
	rows := []workflows.ShardRow{}
	asked := time.Now()
	v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryShards)
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return rows, nil // ended since
		}
		return nil, fmt.Errorf("query %s (%s, its build knows no %s): %w%s", id, workflows.QueryShards, workflows.QueryShardsPage, err, noWorkerHint(ctx, c, err, time.Since(asked)))
	}
	if err := v.Get(&rows); err != nil {
		return nil, fmt.Errorf("decode the shards of %s: %w", id, err)
	}
	return rows, nil
}

// shardsTable is the table of a coordinator's shards.
func shardsTable(rows []workflows.ShardRow) *table {
	t := newTable("SHARD", "OWNER", "EPOCH", "STATUS", "ROUND", "CHECKPOINT", "CURSOR", "AGE", "DURATION", "BYTES", "LOCAL", "ERROR")
	for _, r := range rows {
		var owner, epoch, took any
		if r.Owner.WorkerID != "" {
			owner, epoch = r.Owner.WorkerID, r.Owner.Epoch
		}
		if r.CheckpointID > 0 {
			took = r.Duration.D()
		}
		t.add(r.Shard, owner, epoch, r.Status, r.Round, r.CheckpointID, r.Cursor, age(r.At), took, r.Bytes, r.Local, r.Error)
	}
	return t
}
