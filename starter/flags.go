package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

// waitFlags are the one way a command waits for what it started: --wait
// (a switch: stay until it ends, showing progress) and --timeout (how
// long --wait may take; 0: until it ends or Ctrl-C).
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

// add declares --wait (what: "until the backfill ends") and --timeout
// with its default.
func (w *waitFlags) add(cmd *cobra.Command, what string, timeout time.Duration) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait "+what)
	cmd.Flags().DurationVar(&w.timeout, "timeout", timeout, "with --wait: give up after this long (0: no limit)")
}

// check refuses --timeout without --wait and negative timeouts.
func (w *waitFlags) check(cmd *cobra.Command) error {
	if cmd.Flags().Changed("timeout") && !w.wait {
		return usagef("--timeout bounds --wait: add --wait")
	}
	if w.timeout < 0 {
		return usagef("--timeout %s must not be negative", w.timeout)
	}
	return nil
}

// context returns ctx bounded by --timeout.
func (w *waitFlags) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if w.timeout > 0 {
		return context.WithTimeout(ctx, w.timeout)
	}
	return context.WithCancel(ctx)
}
