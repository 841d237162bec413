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

const wrongStoreEnv = "COORDTEST_WRONG_STORE_CHILD"

// TestWrongStoreChild runs the suite against openWatchStore; only
// TestSuiteFailsAWatchCloseThatLeavesEventsOpen runs it, expecting it to
// fail.
func TestWrongStoreChild(t *testing.T) {
	if os.Getenv(wrongStoreEnv) != "1" {
		t.Skip("run by TestSuiteFailsAWatchCloseThatLeavesEventsOpen")
	}
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		clk := vclock.New(time.Unix(1_700_000_000, 0))
		s, err := memstore.New(memstore.WithClock(clk))
		require.NoError(t, err)
		return coordtest.Harness{Store: openWatchStore{s}, Advance: clk.Advance, EventWait: time.Second}
	})
}

// TestSuiteFailsAWatchCloseThatLeavesEventsOpen: WatchCloseAndCancel
// waited for Events to close after Close with no deadline, so a store
// whose Close leaves the watch running hung the suite (until go test's
// own timeout, naming no store and no check) where the package doc says
// every wait has a deadline. It fails the check, saying so.
func TestSuiteFailsAWatchCloseThatLeavesEventsOpen(t *testing.T) {
	if os.Getenv(wrongStoreEnv) == "1" {
		t.Skip("the child")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWrongStoreChild$/^WatchCloseAndCancel$", "-test.count=1", "-test.timeout=30s")
	cmd.Env = append(os.Environ(), wrongStoreEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed a store whose Close leaves the watch open:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestWrongStoreChild/WatchCloseAndCancel", "%s", out)
	require.Contains(t, string(out), "Close did not close Events", "%s", out)
	require.NotContains(t, string(out), "test timed out", "%s", out)
}
