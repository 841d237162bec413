package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

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
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "now",
		Short: "Ask for a checkpoint of the whole pipeline now and wait for it",
		Long: `Ask the pipeline's checkpoint coordinator for a round now (a Workflow
Update): the round starts after the request, even if one is running, and
the command prints its summary when it ends — no polling (--wait is
implied; --timeout bounds how long it waits).

Pipelines still on per-shard checkpoint workflows (no coordinator running)
are signalled shard by shard instead; --shard picks shards there, and
--wait stays until each has finished one checkpoint.

Exit code 3: the pipeline runs neither a coordinator nor checkpoint
workflows.`,
		Example: "  starter checkpoint now --pipeline iot-portal --timeout 30s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			running, err := workflows.CoordinatorRunning(ctx, c, pipeline)
			if err != nil {
				return err
			}
			if !running {
				if err := wf.check(cmd); err != nil {
					return err
				}
				return a.checkpointNowPerShard(cmd, c, pipeline, shards, wf)
			}
			if len(shards) > 0 {
				return usagef("pipeline %q runs a checkpoint coordinator, whose rounds checkpoint every shard: --shard does not apply", pipeline)
			}
			wf.wait = true // an Update waits for its round
			if err := wf.check(cmd); err != nil {
				return err
			}
			wctx, cancel := wf.context(ctx)
			defer cancel()
			sum, err := workflows.CheckpointRoundNow(wctx, c, pipeline, "starter checkpoint now")
			if err != nil {
				if wctx.Err() != nil && ctx.Err() == nil {
					return fmt.Errorf("pipeline %q: the round did not finish within --timeout %s (it goes on): %w", pipeline, wf.timeout, err)
				}
				return err
			}
			return a.emit(map[string]any{"coordinator": workflows.CoordinatorWorkflowID(pipeline), "round": sum}, func(w io.Writer) {
				printf(w, "%s\n", sum)
			})
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	cmd.Flags().StringSliceVar(&shards, "shard", nil, "only these shards (per-shard checkpoint workflows only)")
	wf.add(cmd, "until the round (or, per-shard workflows, every shard's checkpoint) has finished; implied with a coordinator", time.Minute)
	return cmd
}

// checkpointNowPerShard signals the per-shard checkpoint workflows of a
// pipeline that runs no coordinator yet, and polls their state when asked
// to wait. It goes when the per-shard workflows go.
func (a *app) checkpointNowPerShard(cmd *cobra.Command, c client.Client, pipeline string, shards []string, wf waitFlags) error {
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
		return notFoundError{fmt.Errorf("pipeline %q runs neither a checkpoint coordinator nor checkpoint workflows", pipeline)}
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
	var after []workflows.CheckpointState
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
