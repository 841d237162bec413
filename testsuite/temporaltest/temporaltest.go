package temporaltest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/testsuite/toolbin"
	"github.com/tflo-io/tflo/workflows"
)

// Server is a running dev server.
type Server struct {
	// HostPort is the frontend address.
	HostPort string
	// Client is connected to the default namespace.
	Client client.Client

	dev *testsuite.DevServer
}

// Binary returns the temporal CLI path and whether it exists
// ($TFLO_TEMPORAL, else <repo>/bin/temporal).
func Binary() (string, bool) { return toolbin.Path("temporal", "TFLO_TEMPORAL") }

// Start starts a dev server for t, or skips t when the CLI is not built
// (fails instead under TFLO_REQUIRE_SERVICES=1).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := toolbin.Require(t, "temporal", "TFLO_TEMPORAL")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	logger := log.NewStructuredLogger(slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})))
	dev, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  bin,
		ClientOptions: &client.Options{Logger: logger}, // free loopback port
		LogLevel:      "error",
		SearchAttributes: temporal.NewSearchAttributes(
			workflows.SearchPipeline.ValueSet(""),
			workflows.SearchShard.ValueSet(""),
			workflows.SearchLastCheckpoint.ValueSet(time.Time{}),
			workflows.SearchBreakerState.ValueSet(""),
		),
		ExtraArgs: []string{"--headless"},
		Stdout:    out,
		Stderr:    out,
	})
	if err != nil {
		t.Fatalf("start temporal dev server (%s): %v", bin, err)
	}
	s := &Server{HostPort: dev.FrontendHostPort(), Client: dev.Client(), dev: dev}
	t.Cleanup(func() {
		if err := dev.Stop(); err != nil {
			t.Logf("stop temporal dev server: %v", err)
		}
	})
	return s
}
