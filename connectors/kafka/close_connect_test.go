package kafka

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCloseWhileConnectingStopsRun: Close called while Run checks that it
// can reach the brokers (here a broker that does not answer) stops Run at
// once, and Run returns nil: the stop was requested and nothing was owned.
// Bug: Close only cancelled the context Run made after that check, so it
// waited for the brokers' answer (or the dial and request timeouts), and
// a check that then failed made Run return its connect error.
func TestCloseWhileConnectingStopsRun(t *testing.T) {
	c := newCluster(t, 1)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the cluster closes
	var held atomic.Bool
	c.ControlKey(kmsg.ApiVersions.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		held.Store(true)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	m := startMember(t, "a", WithBrokers(c.ListenAddrs()...), WithGroup("central"), WithTopics("readings"), WithPartitions(newLedger().as("a")))
	require.Eventually(t, held.Load, 10*time.Second, 5*time.Millisecond, "the connect check never reached the broker")
	go func() { _ = m.src.Close() }()
	select {
	case err := <-m.done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close while it was connecting")
	}
}
