package central

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
)

// metrics are the worker's Prometheus metrics. The counters on the hot
// path are plain atomics read by collector functions, so a record costs a
// few atomic adds whether or not anything scrapes.
type metrics struct {
	recordsIn  atomic.Uint64
	recordsOut atomic.Uint64
	maxTS      atomic.Int64 // newest event time seen (ns)

	checkpointDur *prometheus.HistogramVec
	checkpoints   *prometheus.CounterVec
	breaker       *prometheus.GaugeVec
	leaseRestarts prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, src func() kafka.Stats) (*metrics, error) {
	m := &metrics{
		checkpointDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tflo", Subsystem: "central", Name: "checkpoint_duration_seconds",
			Help:    "Duration of completed checkpoints (snapshot to cursor commit), by shard.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"shard"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tflo", Subsystem: "central", Name: "checkpoints_total",
			Help: "Completed checkpoints, by shard.",
		}, []string{"shard"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tflo", Subsystem: "central", Name: "checkpoint_breaker_state",
			Help: "Checkpoint circuit breaker per owned shard: 0 closed, 1 half-open, 2 open.",
		}, []string{"shard"}),
		leaseRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tflo", Subsystem: "central", Name: "lease_workflow_restarts_total",
			Help: "Lease workflows restarted because one ended while the worker ran (it was declared dead while alive).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "tflo", Subsystem: "central", Name: name, Help: help}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "tflo", Subsystem: "central", Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		m.checkpointDur, m.checkpoints, m.breaker, m.leaseRestarts,
		counter("records_in_total", "Records applied to state.", func() float64 { return float64(m.recordsIn.Load()) }),
		counter("records_out_total", "Derived signals written to the sinks.", func() float64 { return float64(m.recordsOut.Load()) }),
		counter("dlq_total", "Records that failed to decode, sent to the dead-letter topic.", func() float64 { return float64(src().DeadLettered) }),
		counter("dlq_errors_total", "Dead letters that could not be produced.", func() float64 { return float64(src().DeadLetterErrors) }),
		counter("dropped_total", "Records dropped because their partition was no longer owned.", func() float64 { return float64(src().Dropped) }),
		gauge("owned_partitions", "Partitions this member owns.", func() float64 { return float64(src().Owned) }),
		gauge("event_lag_seconds", "Wall clock minus the newest event time applied (0 before the first record).", func() float64 {
			ts := m.maxTS.Load()
			if ts == 0 {
				return 0
			}
			return time.Since(time.Unix(0, ts)).Seconds()
		}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) seenTS(ns int64) {
	for {
		old := m.maxTS.Load()
		if ns <= old || m.maxTS.CompareAndSwap(old, ns) {
			return
		}
	}
}

func breakerValue(s streaming.BreakerState) float64 {
	switch s {
	case streaming.BreakerHalfOpen:
		return 1
	case streaming.BreakerOpen:
		return 2
	}
	return 0
}
