package mqttbroker_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// Close returns while clients are still dialling, connected, or half
// way (a TCP connection that never sent CONNECT), and under -race the
// server's wait for its clients races no late attach.
func TestCloseWhileClientsDial(t *testing.T) {
	for range 20 {
		b, err := mqttbroker.Start(mqttbroker.Options{})
		require.NoError(t, err)

		// A connected MQTT client and a silent TCP connection.
		conn, err := net.Dial("tcp", b.Addr())
		require.NoError(t, err)
		cli := paho.NewClient(paho.ClientConfig{Conn: conn})
		_, err = cli.Connect(context.Background(), &paho.Connect{ClientID: "c", CleanStart: true, KeepAlive: 30})
		require.NoError(t, err)
		silent, err := net.Dial("tcp", b.Addr())
		require.NoError(t, err)
		defer silent.Close()

		// Dialers that keep connecting until the broker is gone.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					c, err := net.Dial("tcp", b.Addr())
					if err != nil {
						return
					}
					_ = c.Close()
				}
			})
		}
		closed := make(chan error, 1)
		go func() { closed <- b.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return")
		}
		cancel()
		wg.Wait()
		// The silent connection was closed by the broker.
		require.NoError(t, silent.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = silent.Read(make([]byte, 1))
		require.Error(t, err)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the broker left the silent connection open: %v", err)
	}
}
