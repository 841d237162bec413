package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

func (a *app) pipelineCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "Start, stop and inspect a pipeline's checkpoint workflows",
	}
	cmd.AddCommand(a.pipelineStart(), a.pipelineStop(), a.pipelineStatus())
	return cmd
}

type shardFlags struct {
	pipeline   string
	shards     []string
	topic      string
	partitions int32
}

func (s *shardFlags) add(cmd *cobra.Command, needShards bool) {
	cmd.Flags().StringVar(&s.pipeline, "pipeline", "iot-portal", "pipeline name")
	if needShards {
		cmd.Flags().StringSliceVar(&s.shards, "shard", nil, "shard names (repeat or comma-separate)")
		cmd.Flags().StringVar(&s.topic, "topic", "", "Kafka topic: with --partitions, one shard per partition (<topic>/<n>)")
		cmd.Flags().Int32Var(&s.partitions, "partitions", 0, "number of partitions of --topic")
	}
}

func (s *shardFlags) names() ([]streaming.ShardID, error) {
	var out []streaming.ShardID
	for _, sh := range s.shards {
		out = append(out, streaming.ShardID(sh))
	}
	if s.topic != "" || s.partitions != 0 {
		if s.topic == "" || s.partitions <= 0 {
			return nil, usagef("--topic and --partitions go together (got topic %q, partitions %d)", s.topic, s.partitions)
		}
		for p := int32(0); p < s.partitions; p++ {
			out = append(out, streaming.KafkaShard(s.topic, p))
		}
	}
	if len(out) == 0 {
		return nil, usagef("name the shards: --shard a,b or --topic T --partitions N")
	}
	return out, nil
}

func (a *app) pipelineStart() *cobra.Command {
	var sf shardFlags
	var in workflows.CheckpointInput
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start (or keep) the checkpoint workflow of every shard of a pipeline",
		Long: `Start the checkpoint workflow of each shard. Starting is idempotent: a
shard whose workflow already runs keeps it. Workers announce themselves to
these workflows when they gain a shard; until then the workflows wait.`,
		Example: "  starter pipeline start --pipeline iot-portal --topic signals --partitions 4 --interval 10s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			shards, err := sf.names()
			if err != nil {
				return err
			}
			for _, f := range []struct {
				flag     string
				negative bool
			}{{"--interval", in.Interval < 0}, {"--breaker-threshold", in.BreakerThreshold < 0}, {"--breaker-cool-down", in.BreakerCoolDown < 0}} {
				if f.negative {
					return usagef("%s %s must not be negative", f.flag, cmd.Flags().Lookup(f.flag[2:]).Value)
				}
			}
			c, err := a.dial()
			if err != nil {
				return err
			}
			type started struct {
				Shard      streaming.ShardID `json:"shard"`
				WorkflowID string            `json:"workflow_id"`
				RunID      string            `json:"run_id"`
			}
			var out []started
			for _, sh := range shards {
				w := in
				w.Pipeline, w.Shard = sf.pipeline, sh
				if err := w.Validate(); err != nil {
					return usageError{err}
				}
				id := workflows.CheckpointWorkflowID(sf.pipeline, sh)
				run, err := c.ExecuteWorkflow(cmd.Context(), client.StartWorkflowOptions{
					ID:                       id,
					TaskQueue:                workflows.ControlTaskQueue,
					WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
				}, workflows.CheckpointWorkflow, w)
				if err != nil {
					return fmt.Errorf("start checkpoint workflow %s: %w", id, err)
				}
				out = append(out, started{sh, id, run.GetRunID()})
			}
			return a.emit(out, func(w io.Writer) {
				for _, s := range out {
					printf(w, "checkpoint workflow %s running (shard %s)\n", s.WorkflowID, s.Shard)
				}
			})
		},
	}
	sf.add(cmd, true)
	cmd.Flags().DurationVar(&in.Interval, "interval", 10*time.Second, "time between checkpoints")
	cmd.Flags().IntVar(&in.BreakerThreshold, "breaker-threshold", 3, "consecutive failed checkpoints that open the breaker")
	cmd.Flags().DurationVar(&in.BreakerCoolDown, "breaker-cool-down", time.Minute, "how long an open breaker skips checkpoints")
	return cmd
}

// checkpointRuns lists the running checkpoint workflows of a pipeline
// through the visibility API (search attribute TfloPipeline).
func (a *app) checkpointRuns(ctx context.Context, c client.Client, pipeline string, runningOnly bool) ([]*workflowExecution, error) {
	q := fmt.Sprintf("WorkflowType = 'CheckpointWorkflow' AND %s = %s", workflows.SearchPipeline.GetName(), quote(pipeline))
	if runningOnly {
		q += " AND ExecutionStatus = 'Running'"
	}
	var out []*workflowExecution
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list checkpoint workflows of pipeline %q: %w", pipeline, err)
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
	var sf shardFlags
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Ask every running checkpoint workflow of a pipeline to finish",
		Long: `Ask every running checkpoint workflow of the pipeline to finish (each
takes no further checkpoint and ends with its final state).

Exit code 3: the pipeline has no running checkpoint workflow.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial()
			if err != nil {
				return err
			}
			runs, err := a.checkpointRuns(cmd.Context(), c, sf.pipeline, true)
			if err != nil {
				return err
			}
			if len(runs) == 0 {
				return notFoundError{fmt.Errorf("pipeline %q has no running checkpoint workflows", sf.pipeline)}
			}
			var stopped []string
			for _, r := range runs {
				if err := c.SignalWorkflow(cmd.Context(), r.ID, "", workflows.SignalStop, nil); err != nil {
					return fmt.Errorf("stop %s: %w", r.ID, err)
				}
				stopped = append(stopped, r.ID)
			}
			return a.emit(map[string]any{"pipeline": sf.pipeline, "stopped": stopped}, func(w io.Writer) {
				printf(w, "asked %d checkpoint workflows of %s to stop\n", len(stopped), sf.pipeline)
			})
		},
	}
	sf.add(cmd, false)
	return cmd
}

func (a *app) pipelineStatus() *cobra.Command {
	var sf shardFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each shard's owner, last checkpoint and breaker",
		Long: `Show each running checkpoint workflow of the pipeline: the shard, its owner
and epoch, the last checkpoint (id, cursor, age, duration, bytes), the
breaker and the counts of checkpoints done, failed and skipped. A pipeline
with none prints an empty table ([] under -o json) and exits 0.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial()
			if err != nil {
				return err
			}
			runs, err := a.checkpointRuns(cmd.Context(), c, sf.pipeline, true)
			if err != nil {
				return err
			}
			states := []workflows.CheckpointState{}
			for _, r := range runs {
				v, err := c.QueryWorkflow(cmd.Context(), r.ID, "", workflows.QueryStatus)
				if err != nil {
					return fmt.Errorf("query %s: %w", r.ID, err)
				}
				var st workflows.CheckpointState
				if err := v.Get(&st); err != nil {
					return fmt.Errorf("decode status of %s: %w", r.ID, err)
				}
				states = append(states, st)
			}
			t := statesTable(states)
			t.empty = fmt.Sprintf("pipeline %q has no running checkpoint workflows (start them with: starter pipeline start)", sf.pipeline)
			return a.emitTable(states, t)
		},
	}
	sf.add(cmd, false)
	return cmd
}

// statesTable is the table of checkpoint workflow states that pipeline
// status and checkpoint now print.
func statesTable(states []workflows.CheckpointState) *table {
	t := newTable("SHARD", "OWNER", "EPOCH", "LAST", "CURSOR", "AGE", "DURATION", "BYTES", "BREAKER", "FAILURES", "DONE/FAILED/SKIPPED")
	for _, st := range states {
		var owner, epoch any
		if st.Owner != nil {
			owner, epoch = st.Owner.WorkerID, st.Owner.Epoch
		}
		var took any
		if st.LastID > 0 {
			took = st.LastDuration
		}
		t.add(st.Shard, owner, epoch, st.LastID, st.LastCursor, age(st.LastCompletedAt), took,
			st.LastBytes, st.Breaker, st.ConsecutiveFailures, fmt.Sprintf("%d/%d/%d", st.Completed, st.Failed, st.Skipped))
	}
	return t
}

// printStates writes statesTable(states).
func printStates(w io.Writer, states []workflows.CheckpointState) { statesTable(states).write(w) }
