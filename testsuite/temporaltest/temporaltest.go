package temporaltest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// Server is a running dev server.
type Server struct {
	// HostPort is the frontend address.
	HostPort string
	// Client is connected to the default namespace.
	Client client.Client

	dev *devstack.Temporal
}

// Pid returns the dev server's process id (for its CPU use in /proc).
func (s *Server) Pid() int { return s.dev.Pid() }

// CPU returns the user and system CPU time the dev server has used so far
// (/proc/<pid>/stat; Linux), failing t when it cannot be read.
func (s *Server) CPU(t testing.TB) time.Duration {
	t.Helper()
	pid := s.Pid()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatalf("read the CPU time of the dev server (pid %d): %v", pid, err)
	}
	// Fields after the command name (in parentheses, may hold spaces):
	// utime is field 14, stime 15.
	st := string(raw)
	fields := strings.Fields(st[strings.LastIndexByte(st, ')')+2:])
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// Stop kills the dev server (an outage: SIGKILL); its database stays.
// Client stays open and reconnects after Restart.
func (s *Server) Stop() { s.dev.Stop() }

// Restart starts the stopped dev server again on the same address and
// database, failing t when it does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.dev.Restart(ctx); err != nil {
		t.Fatalf("restart temporal dev server: %v\n%s", err, s.dev.LogTail(4096))
	}
}

// Binary returns the temporal CLI path and whether it exists
// ($TFLO_TEMPORAL, else <repo>/bin/temporal).
func Binary() (string, bool) { return toolbin.Path("temporal", "TFLO_TEMPORAL") }

// Start starts a headless dev server for t, or skips t when the CLI is not
// built (fails instead under TFLO_REQUIRE_SERVICES=1). The server is
// stopped when the test ends (SIGTERM, then SIGKILL after a grace period,
// so a slow shutdown never hangs the test binary).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := toolbin.Require(t, "temporal", "TFLO_TEMPORAL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Dir: t.TempDir(), Bin: bin, Headless: true})
	if err != nil {
		t.Fatalf("start temporal dev server (%s): %v", bin, err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Logf("stop temporal dev server: %v", err)
		}
	})
	return &Server{HostPort: dev.HostPort, Client: dev.Client, dev: dev}
}

// History returns the events of one run of workflow id (runID "" for its
// latest run), failing tb when they cannot be read.
func History(tb testing.TB, ctx context.Context, c client.Client, id, runID string) []*historypb.HistoryEvent {
	tb.Helper()
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			tb.Fatalf("history of workflow %s (run %q): %v", id, runID, err)
		}
		events = append(events, ev)
	}
	return events
}
