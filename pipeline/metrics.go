package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/streaming"
)

// metrics are a worker's Prometheus metrics, each with the constant label
// pipeline. The counters on the hot path are plain atomics read by
// collector functions, so a record costs a few atomic adds whether or not
// anything scrapes.
type metrics struct {
	recordsIn  atomic.Uint64
	recordsOut atomic.Uint64
	maxTS      atomic.Int64  // newest event time seen (ns)
	completed  atomic.Uint64 // checkpoints completed

	// Hostile keys (issue 17): counted here, not per shard, so they
	// survive a shard's release.
	quarantined atomic.Uint64 // keys whose stored state did not load, reset
	keysRefused atomic.Uint64 // records of new keys over state.max_keys, dead-lettered
	expired     atomic.Uint64 // keys dropped after state.key_ttl

	checkpointDur *prometheus.HistogramVec
	checkpoints   *prometheus.CounterVec
	leaseRestarts prometheus.Counter
}

func newMetrics(w *Worker, reg prometheus.Registerer) (*metrics, error) {
	labels := prometheus.Labels{"pipeline": w.c.p.Name}
	m := &metrics{
		checkpointDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tflo", Subsystem: "pipeline", Name: "checkpoint_duration_seconds", ConstLabels: labels,
			Help:    "Duration of completed checkpoints (cut to cursor commit), by shard.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"shard"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tflo", Subsystem: "pipeline", Name: "checkpoints_total", ConstLabels: labels,
			Help: "Completed checkpoints, by shard.",
		}, []string{"shard"}),
		leaseRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tflo", Subsystem: "pipeline", Name: "lease_workflow_restarts_total", ConstLabels: labels,
			Help: "Lease workflows restarted because one ended while the worker ran (it was declared dead while alive).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "tflo", Subsystem: "pipeline", Name: name, Help: help, ConstLabels: labels}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "tflo", Subsystem: "pipeline", Name: name, Help: help, ConstLabels: labels}, f)
	}
	cs := []prometheus.Collector{
		m.checkpointDur, m.checkpoints, m.leaseRestarts,
		counter("records_in_total", "Records applied to state.", func() float64 { return float64(m.recordsIn.Load()) }),
		counter("records_out_total", "Outputs written to the sinks.", func() float64 { return float64(m.recordsOut.Load()) }),
		counter("dlq_total", "Records that failed to decode, sent to the dead-letter destination.", func() float64 { return float64(w.sourceStats().DeadLettered) }),
		counter("dlq_errors_total", "Dead letters that could not be delivered.", func() float64 { return float64(w.sourceStats().DeadLetterErrors) }),
		counter("dropped_total", "Records dropped because their shard was no longer owned.", func() float64 { return float64(w.sourceStats().Dropped) }),
		counter("keys_quarantined_total", "Keys whose stored state did not load (corrupt or poisoned): reset, the shard carried on.", func() float64 { return float64(m.quarantined.Load()) }),
		counter("keys_refused_total", "Records of new keys over state.max_keys, sent to the dead-letter destination.", func() float64 { return float64(m.keysRefused.Load()) }),
		counter("keys_expired_total", "Keys unseen for state.key_ttl, dropped with their state.", func() float64 { return float64(m.expired.Load()) }),
		counter("sink_dropped_total", "Outputs the sinks dropped instead of failing their batch (a non-finite value, a sensor id the sink's store refuses).", func() float64 { return float64(w.sinks.dropped()) }),
		gauge("owned_shards", "Shards this worker owns.", func() float64 { return float64(w.sourceStats().Owned) }),
		gauge("event_lag_seconds", "Wall clock minus the newest event time applied (0 before the first record).", func() float64 {
			ts := m.maxTS.Load()
			if ts == 0 {
				return 0
			}
			return time.Since(time.Unix(0, ts)).Seconds()
		}),
		&shardCollector{w: w, labels: labels},
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// applied counts a chunk of applied records and their outputs.
func (m *metrics) applied(records, outputs uint64, maxTS int64) {
	m.recordsIn.Add(records)
	m.recordsOut.Add(outputs)
	for {
		old := m.maxTS.Load()
		if maxTS <= old || m.maxTS.CompareAndSwap(old, maxTS) {
			return
		}
	}
}

// checkpointed counts a completed checkpoint.
func (m *metrics) checkpointed(shard streaming.ShardID, st streaming.CheckpointStatus) {
	m.completed.Add(1)
	m.checkpoints.WithLabelValues(string(shard)).Inc()
	m.checkpointDur.WithLabelValues(string(shard)).Observe(st.LastDuration.Seconds())
}

// shardCollector reports per held shard: the checkpoint breaker's state
// and the age of the last completed checkpoint, and the keyed state's
// cached keys and memory.
type shardCollector struct {
	w      *Worker
	labels prometheus.Labels
}

var (
	descBreaker = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_checkpoint_breaker_state", "Checkpoint circuit breaker per owned shard: 0 closed, 1 half-open, 2 open.", []string{"shard"}, l)
	}
	descAge = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_checkpoint_age_seconds", "Time since the shard's last completed checkpoint (since it was gained, before the first).", []string{"shard"}, l)
	}
	descCached = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_cached_keys", "Keys of the shard held in memory by the keyed state.", []string{"shard"}, l)
	}
	descMemory = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_memory_bytes", "Memory the shard's keyed state counts against its budget (cache, changed keys, Badger's share).", []string{"shard"}, l)
	}
)

func (c *shardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBreaker(c.labels)
	ch <- descAge(c.labels)
	ch <- descCached(c.labels)
	ch <- descMemory(c.labels)
}

func (c *shardCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.w.shards() {
		st := s.cp.Status()
		ch <- prometheus.MustNewConstMetric(descBreaker(c.labels), prometheus.GaugeValue, breakerValue(st.Breaker), string(s.id))
		since := st.LastCompletedAt
		if since.IsZero() {
			since = s.since
		}
		ch <- prometheus.MustNewConstMetric(descAge(c.labels), prometheus.GaugeValue, time.Since(since).Seconds(), string(s.id))
		ks := s.rt.Stats()
		ch <- prometheus.MustNewConstMetric(descCached(c.labels), prometheus.GaugeValue, float64(ks.Cached), string(s.id))
		ch <- prometheus.MustNewConstMetric(descMemory(c.labels), prometheus.GaugeValue, float64(ks.BadgerBytes+ks.CacheBytes+ks.ChangedBytes), string(s.id))
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
