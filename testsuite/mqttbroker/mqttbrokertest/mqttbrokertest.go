package mqttbrokertest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// Start starts a broker with o, failing the test if it does not start,
// and closes it at the test's end (Close is idempotent: a test may stop
// it earlier).
func Start(t testing.TB, o mqttbroker.Options) *mqttbroker.Broker {
	t.Helper()
	b, err := mqttbroker.Start(o)
	require.NoError(t, err, "mqtt broker")
	t.Cleanup(func() { _ = b.Close() })
	return b
}
