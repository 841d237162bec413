package workflows_test

import (
	"errors"
	"log/slog"
	"os"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

// quietSuite returns a test suite that logs warnings and errors only.
func quietSuite() *testsuite.WorkflowTestSuite {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	return &s
}

// logPanic prints the workflow stack of a panic, which the test
// environment otherwise reduces to its message.
func logPanic(t *testing.T, err error) {
	t.Helper()
	var pe *temporal.PanicError
	if errors.As(err, &pe) {
		t.Log(pe.StackTrace())
	}
}
