package mosquittotest_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mosquittotest"
)

// squatter is a mosquitto wrapper that, on its first run only, tells the
// test the port it was given (port file) and waits for the test to take
// that port (go file) before starting mosquitto, which then cannot bind
// it: another server taking the port between the pick and the bind.
const squatter = `#!/bin/sh
dir=$(dirname "$0")
if [ ! -e "$dir/squatted" ]; then
	: > "$dir/squatted"
	sed -n 's/^listener \([0-9]*\).*/\1/p' "$2" > "$dir/port.tmp" && mv "$dir/port.tmp" "$dir/port"
	while [ ! -e "$dir/go" ]; do sleep 0.01; done
fi
exec "$REAL_MOSQUITTO" "$@"
`

// TestStartOnATakenPort: Start took any connection accepted on the
// port it picked as mosquitto being up, so when another server had taken
// the port it returned that server's address (mosquitto having exited
// with "Address already in use"). It waits until mosquitto itself says it
// is running, and starts again on a new port.
func TestStartOnATakenPort(t *testing.T) {
	real, ok := mosquittotest.Binary()
	if !ok {
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
			t.Fatal("mosquitto not found; `apt-get install -y mosquitto` installs it (TFLO_REQUIRE_SERVICES=1)")
		}
		t.Skip("mosquitto not found")
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "mosquitto")
	require.NoError(t, os.WriteFile(wrapper, []byte(squatter), 0o755))
	t.Setenv("TFLO_MOSQUITTO", wrapper)
	t.Setenv("REAL_MOSQUITTO", real)

	// The other server: takes the port the first mosquitto is given, and
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

	b := mosquittotest.Start(t)
	addr := <-taken
	require.NotEmpty(t, addr, "the test could not take the port the wrapper was given")
	require.NotEqual(t, addr, b.Addr(), "Start returned the address another server had taken; mosquitto's log:\n%s", b.Log())

	// And it is mosquitto there: an MQTT client connects.
	conn, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	cli := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cli.Connect(ctx, &paho.Connect{ClientID: "taken-port", CleanStart: true, KeepAlive: 30})
	require.NoError(t, err)
	require.Zero(t, ack.ReasonCode)
}
