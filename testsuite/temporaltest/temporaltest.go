package temporaltest

import (
	"context"
	"testing"
	"time"

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
