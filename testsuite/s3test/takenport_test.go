package s3test_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/portsquat"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// TestStartOnATakenPort: Start took any connection accepted on the port
// it picked as versitygw being up, so when another server had taken the
// port it returned that server's URL (versitygw having exited with
// "address already in use"). It waits until its own versitygw answers,
// and starts again on a new port.
func TestStartOnATakenPort(t *testing.T) {
	real := toolbin.Require(t, "versitygw", "TFLO_VERSITYGW")
	// The other server takes the port the first versitygw is given (its
	// --port HOST:PORT argument) and accepts connections.
	wrapper, taken := portsquat.Squat(t, real, `prev=; for a in "$@"; do if [ "$prev" = "--port" ]; then echo "${a##*:}"; fi; prev=$a; done`, portsquat.AcceptAndClose)
	t.Setenv("TFLO_VERSITYGW", wrapper)

	srv := s3test.Start(t, "bucket")
	addr := <-taken
	require.NotEmpty(t, addr, "the test could not take the port the wrapper was given")
	require.NotEqual(t, "http://"+addr, srv.URL, "Start returned the URL of another server on the port")

	// And it is versitygw there: an object goes in and is listed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loc, err := archiveloc.Parse("s3://bucket/p")
	require.NoError(t, err)
	a, err := archiveloc.Open(ctx, loc, srv.Settings(t))
	require.NoError(t, err)
	require.NoError(t, a.PutAtomic(ctx, "x", []byte("v")))
	objs, err := a.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, objs, 1)
}
