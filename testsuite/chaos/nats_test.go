package chaos

import (
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/loopport"
)

// natsStore is the central workers' coordination store: an in-process
// JetStream nats-server on a fixed loopback port and store folder, so it
// can be cut (shut down) and brought back where the workers reconnect.
type natsStore struct {
	opts natsserver.Options
	srv  *natsserver.Server
}

func startNATS(t testing.TB) *natsStore {
	t.Helper()
	port, err := loopport.PickPort()
	require.NoError(t, err)
	n := &natsStore{opts: natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}}
	t.Cleanup(n.stop) // before restart: a server that does not come up is shut down too
	n.restart(t)
	return n
}

// url is the server's client URL (the same across restarts).
func (n *natsStore) url() string { return n.srv.ClientURL() }

// stop shuts the server down and waits until it has.
func (n *natsStore) stop() {
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// restart starts a new server on the same port and store folder and waits
// until it accepts connections.
func (n *natsStore) restart(t testing.TB) {
	t.Helper()
	opts := n.opts
	srv, err := natsserver.NewServer(&opts)
	require.NoError(t, err)
	go srv.Start()
	// Kept before the wait: a server that does not come up is still
	// running, and stop (the test's cleanup) shuts it down.
	n.srv = srv
	require.True(t, srv.ReadyForConnections(15*time.Second), "nats-server did not come up on %s:%d", opts.Host, opts.Port)
}
