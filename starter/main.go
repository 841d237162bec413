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
