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
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "now",
		Short: "Ask for a checkpoint of the whole pipeline now and wait for it",
		Long: `Ask the pipeline's checkpoint coordinator for a round now (a Workflow
Update): the round starts after the request, even if one is running, and
the command prints its summary when it ends — no polling (--wait is
implied; --timeout bounds how long it waits).

Exit code 3: the pipeline runs no checkpoint coordinator. Exit code 1,
at once, when no control worker polls task queue tflo-control: nothing
would run the round.`,
		Example: "  starter checkpoint now --pipeline iot-portal --timeout 30s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("wait") && !wf.wait {
				// Not ignored: the Update has no way not to wait.
				return usagef("--wait=false: checkpoint now always waits for its round (--timeout bounds the wait)")
			}
			wf.wait = true // an Update waits for its round
			if err := wf.check(cmd); err != nil {
				return err
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			running, err := workflows.CoordinatorRunning(ctx, c, pipeline)
			if err != nil {
				return err
			}
			if !running {
				return notFoundError{fmt.Errorf("pipeline %q runs no checkpoint coordinator (its workers start it when they announce their shards; or: starter pipeline start)", pipeline)}
			}
			// Without a control worker the Update would wait out --timeout
			// for a round that never starts.
			if err := noControlWorker(ctx, c, fmt.Sprintf("pipeline %q: no round started", pipeline)); err != nil {
				return err
			}
			wctx, cancel := wf.context(ctx)
			defer cancel()
			sum, err := workflows.CheckpointRoundNow(wctx, c, pipeline, "starter checkpoint now")
			if err != nil {
				if wf.expired(ctx, wctx, err) {
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
	wf.add(cmd, "until the round has finished (implied)", time.Minute)
	return cmd
}

func (a *app) checkpointList() *cobra.Command {
	var pipeline string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the pipeline's checkpoint coordinator runs with their search attributes (as the web UI shows them)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			runs, err := a.coordinatorRuns(cmd.Context(), c, pipeline, !all)
			if err != nil {
				return err
			}
			t := newTable("PIPELINE", "STATUS", "BREAKER", "STARTED", "WORKFLOW ID")
			for _, r := range runs {
				t.add(r.Pipeline, r.Status, r.Breaker, r.Started, r.ID)
			}
			t.empty = fmt.Sprintf("no checkpoint coordinator for pipeline %q", pipeline)
			return a.emitTable(runs, t)
		},
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "iot-portal", "pipeline name")
	cmd.Flags().BoolVar(&all, "all", false, "include closed runs")
	return cmd
}
