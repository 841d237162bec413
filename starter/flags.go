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

// expired tells whether err came from --timeout running out (wctx, from
// context) rather than from the caller (ctx) or the call itself. The server
// sees the deadline too and may reset the call a moment before the client's
// timer fires, with wctx not yet done: a Canceled or DeadlineExceeded that
// close to the deadline is the timeout as well.
func (w *waitFlags) expired(ctx, wctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if wctx.Err() != nil {
		return true
	}
	dl, ok := wctx.Deadline()
	if !ok || time.Until(dl) > time.Second {
		return false
	}
	return timedOutOnServer(err)
}
