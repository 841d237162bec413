package pipeline

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// TestBreakerSeries: a breaker is one series per state, 1 for the current
// one (state="open" 1 while open), instead of one gauge coding the state
// as 0, 1 or 2.
func TestBreakerSeries(t *testing.T) {
	d := prometheus.NewDesc("b", "b", []string{"shard", "state"}, nil)
	for _, cur := range breakerStates {
		ch := make(chan prometheus.Metric, len(breakerStates))
		breakerSeries(ch, d, cur, "s0")
		close(ch)
		got := map[string]float64{}
		for m := range ch {
			var pb dto.Metric
			require.NoError(t, m.Write(&pb))
			labels := map[string]string{}
			for _, l := range pb.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, "s0", labels["shard"])
			got[labels["state"]] = pb.GetGauge().GetValue()
		}
		want := map[string]float64{"closed": 0, "half-open": 0, "open": 0}
		want[cur.String()] = 1
		require.Equal(t, want, got, "breaker %s", cur)
	}
	require.Equal(t, []streaming.BreakerState{streaming.BreakerClosed, streaming.BreakerHalfOpen, streaming.BreakerOpen}, breakerStates)
}
