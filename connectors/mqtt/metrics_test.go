package mqtt

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

func TestPrometheusCountersFollowStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	hook, err := PrometheusCounters(reg, "tflo", "edge-prom")
	require.NoError(t, err)
	_, err = PrometheusCounters(reg, "tflo", "edge-prom-2") // a second source shares the vector
	require.NoError(t, err)

	b := startBroker(t, mqttbroker.Options{})
	s := newTestSource(t, b, "edge-prom", WithCounterHook(hook))
	var rec recorder
	runSource(t, s, rec.handle)
	waitSubscribed(t, s, 1)
	require.NoError(t, b.srv.Publish("sensors/p", reading("p", 1, 1), false, 2))
	require.NoError(t, b.srv.Publish("sensors/p", []byte("garbage"), false, 2))
	require.Eventually(t, func() bool { return s.Stats().DeadLettered == 1 && rec.len() == 1 }, waitFor, time.Millisecond)

	vec := func(counter string) float64 {
		m, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range m {
			for _, met := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range met.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["client_id"] == "edge-prom" && labels["counter"] == counter {
					return met.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	assert.Equal(t, 1.0, vec("processed"))
	assert.Equal(t, 1.0, vec("dead_lettered"))
	assert.Equal(t, float64(s.Stats().Received), vec("received"))
	assert.Positive(t, testutil.CollectAndCount(reg))
}
