package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tflo-io/tflo/internal/interrupt"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := interruptContext(context.Background(), sigs, os.Stderr, os.Exit)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	signal.Stop(sigs)
	os.Exit(code)
}

// interruptContext returns a context the first signal on sigs cancels:
// the command stops cleanly (the demo drains its workers and takes their
// final checkpoints). A second signal while it stops gives that up, as
// most CLIs do: it says so on errOut and calls exit(exitInterrupted)
// (signal.NotifyContext kept catching the signal, so a second Ctrl-C was
// ignored). stop releases sigs.
func interruptContext(parent context.Context, sigs <-chan os.Signal, errOut io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	return interrupt.Context(parent, sigs, func() {
		fmt.Fprintln(errOut, "Error: interrupted again: stopping at once, without a clean stop")
		exit(exitInterrupted)
	})
}

// Exit codes scripts can rely on (the root help and README list them).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitInterrupted = 130
)

// usageError marks an error in how the command was called: an unknown
// command or flag, an extra argument, a missing or invalid flag value.
type usageError struct{ error }

// notFoundError marks a named object that does not exist: a backfill
// named by --name, a pipeline or shard whose checkpoint workflow
// checkpoint now or pipeline stop acts on. Listings that find nothing are
// not errors.
type notFoundError struct{ error }

// stopError marks a failure of a command's clean stop (the demo's drain
// and final checkpoints), which an interrupt starts rather than causes:
// execute reports it as itself, not as "interrupted".
type stopError struct{ error }

func (e stopError) Unwrap() error { return e.error }

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	var nf notFoundError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &nf):
		return exitNotFound
	}
	return exitFailure
}

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// execute runs the CLI with args and returns the exit code. It is the one
// place errors are printed: "Error: <message>" on errOut, and for usage
// errors a pointer to the command's help.
func execute(ctx context.Context, args []string, out, errOut io.Writer) int {
	root, a := newRoot(out, errOut)
	return executeRoot(ctx, root, a, args)
}

// executeRoot is execute with the tree built, and closes a's client when
// the command has run, whatever it returned.
func executeRoot(ctx context.Context, root *cobra.Command, a *app, args []string) int {
	defer a.close()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var stopErr stopError
	if errors.Is(ctx.Err(), context.Canceled) && !errors.As(err, &stopErr) {
		// SIGINT or SIGTERM: whatever failed, failed because of it.
		fmt.Fprintln(a.errOut, "Error: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(a.errOut, "Error: %v\n", err)
	code := exitCode(err)
	if code == exitUsage && cmd != nil {
		fmt.Fprintf(a.errOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}
