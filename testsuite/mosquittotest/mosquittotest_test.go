package mosquittotest_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/portsquat"
	"github.com/tflo-io/tflo/testsuite/mosquittotest"
)

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
	// The other server takes the port the first mosquitto is given (the
	// listener line of its config file, -c FILE) and accepts connections.
	wrapper, taken := portsquat.Squat(t, real, `sed -n 's/^listener \([0-9]*\).*/\1/p' "$2"`, portsquat.AcceptAndClose)
	t.Setenv("TFLO_MOSQUITTO", wrapper)

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
