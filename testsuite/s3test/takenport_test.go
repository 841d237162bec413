package s3test_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// squatter is a versitygw wrapper that, on its first run only, tells the
// test the port it was given (port file) and waits for the test to take
// that port (go file) before starting versitygw, which then cannot bind
// it: another server taking the port between the pick and the bind.
const squatter = `#!/bin/sh
dir=$(dirname "$0")
if [ ! -e "$dir/squatted" ]; then
	: > "$dir/squatted"
	prev=
	for a in "$@"; do
		if [ "$prev" = "--port" ]; then echo "${a##*:}" > "$dir/port.tmp"; fi
		prev=$a
	done
	mv "$dir/port.tmp" "$dir/port"
	while [ ! -e "$dir/go" ]; do sleep 0.01; done
fi
exec "$REAL_VERSITYGW" "$@"
`

// TestStartOnATakenPort: Start took any connection accepted on the port
// it picked as versitygw being up, so when another server had taken the
// port it returned that server's URL (versitygw having exited with
// "address already in use"). It waits until its own versitygw answers,
// and starts again on a new port.
func TestStartOnATakenPort(t *testing.T) {
	real := toolbin.Require(t, "versitygw", "TFLO_VERSITYGW")
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "versitygw")
	require.NoError(t, os.WriteFile(wrapper, []byte(squatter), 0o755))
	t.Setenv("TFLO_VERSITYGW", wrapper)
	t.Setenv("REAL_VERSITYGW", real)

	// The other server: takes the port the first versitygw is given, and
	// accepts connections on it until the test ends.
	taken := make(chan string, 1) // its address; "" when it could not take it
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		defer func() { _ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o600) }()
		var port []byte
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(dir, "port")); err == nil {
				port = b
				break
			}
			time.Sleep(5 * time.Millisecond) // polling for the wrapper's file, against the deadline
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strings.TrimSpace(string(port)))
		if err != nil {
			taken <- ""
			return
		}
		taken <- ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		go func() { <-done; _ = ln.Close() }()
	}()

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
