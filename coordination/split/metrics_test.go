package split_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination/split"
)

func TestMetricsRegisterAndExpose(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := split.NewMetrics(reg)
	m.Owned.WithLabelValues("w1").Set(3)
	m.Draining.WithLabelValues("w1").Set(1)
	m.Quarantined.WithLabelValues("w1").Set(0)
	m.Acquisitions.WithLabelValues("w1").Inc()
	m.Losses.WithLabelValues("w1", split.LossSelfFence).Inc()
	m.Revocations.WithLabelValues("w1", "graceful").Inc()
	m.AssignTime.WithLabelValues("w1").Observe(0.001)
	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	require.ElementsMatch(t, []string{
		"tflo_split_owned", "tflo_split_draining", "tflo_split_quarantined",
		"tflo_split_acquisitions_total", "tflo_split_losses_total", "tflo_split_revocations_total",
		"tflo_split_assignment_seconds",
	}, names)
	require.Panics(t, func() { split.NewMetrics(reg) }, "registering twice on one registry is refused")
}
