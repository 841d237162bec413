package devstack

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tflo-io/tflo/internal/portsquat"
)

// TestStartInfluxOnATakenPort: StartInflux took any /ping answer on its
// HTTP port as influxd being up, so when another server had taken the
// port it returned that server's URL (influxd having exited with
// "address already in use"). It waits until influxd itself listens, and
// starts again on new ports.
func TestStartInfluxOnATakenPort(t *testing.T) {
	requireBinary(t, "influxd", "TFLO_INFLUXD")
	real, err := Binary("influxd", "TFLO_INFLUXD")
	require.NoError(t, err)
	// The [http] section's bind-address (indented; the RPC one is not).
	// Another server answering /ping (204 to everything).
	other := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	t.Cleanup(func() { _ = other.Close() })
	wrapper, taken := portsquat.Squat(t, real, `sed -n 's/^  bind-address = "127.0.0.1:\([0-9]*\)"/\1/p' "$2"`, func(ln net.Listener, reached func()) {
		other.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reached()
			w.WriteHeader(http.StatusNoContent)
		})
		_ = other.Serve(ln)
	})
	ctx := context.Background()
	s, err := StartInflux(ctx, InfluxOptions{Dir: t.TempDir(), Bin: wrapper})
	require.NoError(t, err)
	defer s.Close()
	addr := <-taken
	require.NotEmpty(t, addr, "the test could not take the port the wrapper was given")
	require.NotEqual(t, "http://"+addr, s.URL, "StartInflux returned the URL of another server on the port")
	// And it is influxd there.
	require.NoError(t, s.CreateDatabase(ctx, "d"))
	n, err := s.Count(ctx, "d", "m")
	require.NoError(t, err)
	require.Equal(t, 0, n)
}

// TestStartTemporalOnATakenPort: StartTemporal took any health-check
// answer on its frontend port as the dev server being up, so when another
// gRPC server had taken the port it returned that server's address (the
// dev server having exited with "address already in use"). It waits until
// the dev server itself listens on its ports, and starts again on new
// ones.
func TestStartTemporalOnATakenPort(t *testing.T) {
	requireBinary(t, "temporal", "TFLO_TEMPORAL")
	real, err := Binary("temporal", "TFLO_TEMPORAL")
	require.NoError(t, err)
	portCmd := `prev=; for a in "$@"; do if [ "$prev" = "--port" ]; then echo "$a"; fi; prev=$a; done`
	// Another server answering the health check the client makes, and
	// nothing else.
	var reachedOnce atomic.Pointer[func()]
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r := reachedOnce.Load(); r != nil {
			(*r)()
		}
		return h(ctx, req)
	}))
	hs := health.NewServer()
	hs.SetServingStatus("temporal.api.workflowservice.v1.WorkflowService", healthgrpc.HealthCheckResponse_SERVING)
	healthgrpc.RegisterHealthServer(g, hs)
	workflowservice.RegisterWorkflowServiceServer(g, systemInfoOnly{})
	t.Cleanup(g.Stop)
	wrapper, taken := portsquat.Squat(t, real, portCmd, func(ln net.Listener, reached func()) {
		reachedOnce.Store(&reached)
		_ = g.Serve(ln)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, err := StartTemporal(ctx, TemporalOptions{Dir: t.TempDir(), Bin: wrapper, Headless: true})
	require.NoError(t, err)
	defer tp.Close()
	addr := <-taken
	require.NotEmpty(t, addr, "the test could not take the port the wrapper was given")
	require.NotEqual(t, addr, tp.HostPort, "StartTemporal returned the address of another server on the port")
	// And it is the dev server there.
	_, err = tp.Client.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	require.NoError(t, err)
}

// systemInfoOnly answers GetSystemInfo, which the client dials with, and
// nothing else of the workflow service.
type systemInfoOnly struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (systemInfoOnly) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}
