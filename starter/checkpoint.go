package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

func (a *app) checkpointCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Trigger and list checkpoints",
	}
	cmd.AddCommand(a.checkpointNow(), a.checkpointList())
	return cmd
}

func (a *app) checkpointNow() *cobra.Command {
	var pipeline string
	var shards []string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:     "now",
		Short:   "Ask for a checkpoint now (every shard of the pipeline, or --shard)",
		Example: "  starter checkpoint now --pipeline iot-portal --wait 30s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ids := make([]string, 0, len(shards))
			for _, s := range shards {
				ids = append(ids, workflows.CheckpointWorkflowID(pipeline, streaming.ShardID(s)))
			}
			if len(ids) == 0 {
				runs, err := a.checkpointRuns(ctx, c, pipeline, true)
				if err != nil {
					return err
				}
				for _, r := range runs {
					ids = append(ids, r.ID)
				}
			}
			if len(ids) == 0 {
				return notFoundError{fmt.Errorf("pipeline %q has no running checkpoint workflows", pipeline)}
			}
			before := map[string]workflows.CheckpointState{}
			for _, id := range ids {
				if wait > 0 {
					st, err := queryState(ctx, c, id)
					if err != nil {
						return err
					}
					before[id] = st
				}
				if err := c.SignalWorkflow(ctx, id, "", workflows.SignalCheckpointNow, workflows.CheckpointNow{Reason: "starter checkpoint now"}); err != nil {
					return notFoundError{fmt.Errorf("signal %s: %w", id, err)}
				}
			}
			var after []workflows.CheckpointState
			if wait > 0 {
				deadline := time.Now().Add(wait)
				for _, id := range ids {
					for {
						st, err := queryState(ctx, c, id)
						if err != nil {
							return err
						}
						b := before[id]
						if st.Completed > b.Completed || st.Failed > b.Failed || st.Skipped > b.Skipped {
							after = append(after, st)
							break
						}
						if time.Now().After(deadline) {
							return fmt.Errorf("%s: no checkpoint finished within %s (owner known: %t)", id, wait, st.Owner != nil)
						}
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(200 * time.Millisecond):
						}
					}
				}
			}
			return a.emit(map[string]any{"signalled": ids, "states": after}, func(w io.Writer) {
				printf(w, "asked %d shard(s) of %s for a checkpoint\n", len(ids), pipeline)
				if len(after) > 0 {
					printStates(w, after)
				}
			})
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	cmd.Flags().StringSliceVar(&shards, "shard", nil, "only these shards")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the checkpoints to finish")
	return cmd
}

func (a *app) checkpointList() *cobra.Command {
	var pipeline string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List checkpoint workflows with their search attributes (as the web UI shows them)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial()
			if err != nil {
				return err
			}
			runs, err := a.checkpointRuns(cmd.Context(), c, pipeline, !all)
			if err != nil {
				return err
			}
			return a.emit(runs, func(w io.Writer) {
				if len(runs) == 0 {
					printf(w, "no checkpoint workflows for pipeline %q\n", pipeline)
					return
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SHARD\tSTATUS\tLAST CHECKPOINT\tBREAKER\tWORKFLOW ID")
				for _, r := range runs {
					last := "-"
					if !r.LastCheckpoint.IsZero() {
						last = r.LastCheckpoint.Local().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Shard, r.Status, last, r.Breaker, r.ID)
				}
				tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	cmd.Flags().BoolVar(&all, "all", false, "include closed workflows")
	return cmd
}
