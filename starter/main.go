// Command starter is the tflo CLI: it runs the iot-portal demo and drives
// pipelines, checkpoints and backfills on any Temporal (a dev server, a
// cluster or a cloud namespace).
//
//	starter demo                      the whole iot-portal on this machine
//	starter pipeline start|stop|status
//	starter checkpoint now|list
//	starter backfill start|status|cancel
//
// Every command takes --address, --namespace, TLS and API-key flags (or
// the TEMPORAL_* environment variables) and --json for scripts. Exit codes:
// 0 success, 1 failure, 2 bad usage, 3 not found.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

// Exit codes scripts can rely on.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
)

// usageError marks an error in how the command was called.
type usageError struct{ error }

// notFoundError marks a missing workflow, pipeline or backfill.
type notFoundError struct{ error }

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
