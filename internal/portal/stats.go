package portal

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/workers/simulator"
)

// StackStats is a snapshot of the portal's progress.
type StackStats struct {
	Simulator simulator.Stats `json:"simulator"`
	// Edge: readings applied, signals produced, malformed payloads sent to
	// the MQTT dead-letter topic, checkpoints (last id).
	EdgeReadings    uint64 `json:"edge_readings"`
	EdgeSignals     uint64 `json:"edge_signals"`
	EdgeDLQ         uint64 `json:"edge_dlq"`
	EdgeCheckpoints uint64 `json:"edge_checkpoints"`
	// Central workers, summed: records applied, derived outputs written,
	// dead letters, completed partition checkpoints (driven by the
	// checkpoint workflows, plus those the Kafka source takes itself on
	// assignment, revoke and shutdown), owned partitions.
	CentralIn          uint64 `json:"central_in"`
	CentralOut         uint64 `json:"central_out"`
	CentralDLQ         uint64 `json:"central_dlq"`
	CentralCheckpoints uint64 `json:"central_checkpoints"`
	Owned              []int  `json:"owned"`
	// Lag is the number of signals in Kafka the central workers have not
	// applied yet.
	Lag int64 `json:"lag"`
	// EventLag is the wall clock minus the newest event time applied by
	// the central workers (their largest).
	EventLag time.Duration `json:"event_lag"`
}

// Stats returns the portal's progress.
func (s *Stack) Stats() StackStats {
	var st StackStats
	if s.Simulator != nil {
		st.Simulator = s.Simulator.Stats()
	}
	if s.Edge != nil {
		e := s.Edge.Stats()
		st.EdgeReadings, st.EdgeSignals, st.EdgeDLQ = e.Readings, e.Produced, e.Source.DeadLettered
		st.EdgeCheckpoints = uint64(e.Checkpoint.LastID)
	}
	for _, w := range s.Centrals {
		ks := w.Source().Stats()
		st.CentralIn += ks.Applied
		st.CentralDLQ += ks.DeadLettered
		st.CentralCheckpoints += ks.Checkpoints // in process: on assignment, revoke and shutdown
		st.Owned = append(st.Owned, ks.Owned)
	}
	for name, reg := range s.regs {
		if name == "edge" || name == "simulator" {
			continue
		}
		st.CentralOut += uint64(gather(reg, "tflo_central_records_out_total"))
		st.CentralCheckpoints += uint64(gather(reg, "tflo_central_checkpoints_total")) // driven by the checkpoint workflows
		if l := time.Duration(gather(reg, "tflo_central_event_lag_seconds") * float64(time.Second)); l > st.EventLag {
			st.EventLag = l
		}
	}
	st.Lag = int64(st.EdgeSignals) - int64(st.CentralIn)
	return st
}

// gather sums the values of a metric family of reg (0 when absent).
func gather(reg prometheus.Gatherer, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}
