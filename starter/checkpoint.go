package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

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
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "now",
		Short: "Ask for a checkpoint now (every shard of the pipeline, or --shard)",
		Long: `Ask the checkpoint workflow of every shard of the pipeline (or of each
--shard) for a checkpoint now. With --wait, stay until each has finished
one (done, failed or skipped by the breaker) and show their states.

Exit code 3: the pipeline has no running checkpoint workflow, or a --shard
has none.`,
		Example: "  starter checkpoint now --pipeline iot-portal --wait --timeout 30s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wf.check(cmd); err != nil {
				return err
			}
			c, err := a.dial()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ids := make([]string, 0, len(shards))
			for _, s := range shards {
				ids = append(ids, workflows.CheckpointWorkflowID(pipeline, s))
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
				if wf.wait {
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
			after := []workflows.CheckpointState{}
			if wf.wait {
				wctx, cancel := wf.context(ctx)
				defer cancel()
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
						select {
						case <-wctx.Done():
							if ctx.Err() != nil {
								return ctx.Err()
							}
							return fmt.Errorf("%s: no checkpoint finished within --timeout %s (owner known: %t)", id, wf.timeout, st.Owner != nil)
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
	wf.add(cmd, "until every shard has finished a checkpoint", time.Minute)
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
			t := newTable("SHARD", "STATUS", "LAST CHECKPOINT", "BREAKER", "WORKFLOW ID")
			for _, r := range runs {
				t.add(r.Shard, r.Status, r.LastCheckpoint, r.Breaker, r.ID)
			}
			t.empty = fmt.Sprintf("no checkpoint workflows for pipeline %q", pipeline)
			return a.emitTable(runs, t)
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	cmd.Flags().BoolVar(&all, "all", false, "include closed workflows")
	return cmd
}
