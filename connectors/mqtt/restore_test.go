package mqtt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// TestRestoreKeepsTheConfiguredDedupCapacity: a cursor restored from a
// checkpoint taken with a smaller dedup window (before the receive
// maximum, and the window with it, were raised) keeps the capacities the
// source is configured with, so the window still holds a full in-flight
// burst: a redelivery after more messages than the old window held is
// still dropped, not applied a second time.
func TestRestoreKeepsTheConfiguredDedupCapacity(t *testing.T) {
	old, err := NewSource(WithServers("mqtt://h:1"), WithClientID("c"), WithTopics("sensors/#"), WithReceiveMaximum(2), WithDedupCapacity(2, 2))
	require.NoError(t, err)
	var cursor []byte
	require.NoError(t, old.Cut(func(c []byte) error { cursor = c; return nil }))

	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-grown", WithDedupCapacity(8, 8))
	require.NoError(t, s.Restore(cursor))
	require.Equal(t, 8, s.Stats().WindowCap)
	require.Equal(t, 8, s.Stats().RetainedCap)

	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	cl := b.waitClient(t, "edge-grown")
	inject := func(id uint16, payload []byte, dup bool) { injectQoS2(t, cl, id, payload, dup) }
	for i := range 3 {
		inject(uint16(100+i), reading("x", int64(1000+i), 1), false)
	}
	inject(100, reading("x", 1000, 1), true) // the first again, after two newer
	inject(200, reading("x", 2000, 1), false)
	require.Eventually(t, func() bool { return rec.len() == 4 }, waitFor, time.Millisecond)
	require.Equal(t, uint64(1), s.Stats().Duplicates)
	require.Equal(t, 4, rec.len())
}
