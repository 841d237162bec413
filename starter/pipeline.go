package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
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
		Example: "  starter pipeline start --pipeline iot-portal --topic readings --partitions 4 --interval 10s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			shards, err := sf.names()
			if err != nil {
				return err
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
				return notFoundError{fmt.Errorf("pipeline %q has no running checkpoint workflows (start them with: starter pipeline start)", sf.pipeline)}
			}
			var states []workflows.CheckpointState
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
			return a.emit(states, func(w io.Writer) { printStates(w, states) })
		},
	}
	sf.add(cmd, false)
	return cmd
}

func printStates(w io.Writer, states []workflows.CheckpointState) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tOWNER\tEPOCH\tLAST\tCURSOR\tAGE\tBYTES\tBREAKER\tFAILURES\tDONE/FAILED/SKIPPED")
	for _, st := range states {
		owner, epoch := "-", "-"
		if st.Owner != nil {
			owner, epoch = st.Owner.WorkerID, fmt.Sprint(st.Owner.Epoch)
		}
		age := "-"
		if !st.LastCompletedAt.IsZero() {
			age = time.Since(st.LastCompletedAt).Round(time.Second).String()
		}
		cursor := st.LastCursor
		if cursor == "" {
			cursor = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%d\t%d/%d/%d\n", st.Shard, owner, epoch, st.LastID, cursor, age,
			st.LastBytes, st.Breaker, st.ConsecutiveFailures, st.Completed, st.Failed, st.Skipped)
	}
	tw.Flush()
}
