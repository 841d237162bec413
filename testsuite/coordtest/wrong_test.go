package coordtest_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/testsuite/coordtest"
)

// openWatchStore is a deliberately wrong store: its watchers' Close
// returns without stopping the watch, so Events stays open.
type openWatchStore struct{ coordination.Store }

func (s openWatchStore) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	w, err := s.Store.Watch(ctx, ks, prefix)
	if err != nil {
		return nil, err
	}
	return openWatcher{w}, nil
}

type openWatcher struct{ coordination.Watcher }

func (openWatcher) Close() error { return nil } // the wrong part: the watch goes on

// cancelErrStore is a deliberately wrong store: a watch ended by its
// context reports the context's error, where the contract says nil.
type cancelErrStore struct{ coordination.Store }

func (s cancelErrStore) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	w, err := s.Store.Watch(ctx, ks, prefix)
	if err != nil {
		return nil, err
	}
	return cancelErrWatcher{w, ctx}, nil
}

type cancelErrWatcher struct {
	coordination.Watcher
	ctx context.Context
}

func (w cancelErrWatcher) Err() error {
	if err := w.Watcher.Err(); err != nil {
		return err
	}
	return w.ctx.Err() // the wrong part
}

// wrongStoreEnv names the wrong store TestWrongStoreChild runs the suite
// against: "open-watch" or "cancel-err".
const wrongStoreEnv = "COORDTEST_WRONG_STORE_CHILD"

// TestWrongStoreChild runs the suite against openWatchStore; only
// TestSuiteFailsAWatchCloseThatLeavesEventsOpen runs it, expecting it to
// fail.
func TestWrongStoreChild(t *testing.T) {
	wrong := os.Getenv(wrongStoreEnv)
	if wrong == "" {
		t.Skip("run by the TestSuiteFails tests")
	}
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		clk := vclock.New(time.Unix(1_700_000_000, 0))
		s, err := memstore.New(memstore.WithClock(clk))
		require.NoError(t, err)
		var store coordination.Store
		switch wrong {
		case "open-watch":
			store = openWatchStore{s}
		case "cancel-err":
			store = cancelErrStore{s}
		default:
			t.Fatalf("%s=%q: no such wrong store", wrongStoreEnv, wrong)
		}
		return coordtest.Harness{Store: store, Advance: clk.Advance, EventWait: time.Second}
	})
}

// runWrongChild runs WatchCloseAndCancel against the wrong store named
// wrong in a child process and returns its output, requiring that it
// failed that check.
func runWrongChild(t *testing.T, wrong string) string {
	t.Helper()
	if os.Getenv(wrongStoreEnv) != "" {
		t.Skip("the child")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWrongStoreChild$/^WatchCloseAndCancel$", "-test.count=1", "-test.timeout=30s")
	cmd.Env = append(os.Environ(), wrongStoreEnv+"="+wrong)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed the %s store:\n%s", wrong, out)
	require.Contains(t, string(out), "--- FAIL: TestWrongStoreChild/WatchCloseAndCancel", "%s", out)
	require.NotContains(t, string(out), "test timed out", "%s", out)
	return string(out)
}

// TestSuiteFailsAWatchCloseThatLeavesEventsOpen: WatchCloseAndCancel
// waited for Events to close after Close with no deadline, so a store
// whose Close leaves the watch running hung the suite (until go test's
// own timeout, naming no store and no check) where the package doc says
// every wait has a deadline. It fails the check, saying so.
func TestSuiteFailsAWatchCloseThatLeavesEventsOpen(t *testing.T) {
	require.Contains(t, runWrongChild(t, "open-watch"), "Close did not close Events")
}

// TestSuiteFailsAWatchReportingItsCancelledContext: the contract says a
// watch ended by its context reports no error; WatchCloseAndCancel did
// not look, so a store reporting context.Canceled passed.
func TestSuiteFailsAWatchReportingItsCancelledContext(t *testing.T) {
	require.Contains(t, runWrongChild(t, "cancel-err"), "a watch ended by its context reports no error")
}
