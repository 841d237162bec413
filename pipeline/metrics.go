package pipeline

import (
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
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

	behindGroup atomic.Uint64 // Kafka shards restored behind their group's committed offset

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
		counter("dlq_total", "Records sent to the dead-letter destination: they failed to decode, were outside the pipeline's limits, or were of a new key over state.max_keys.", func() float64 { return float64(w.sourceStats().DeadLettered) }),
		counter("dlq_errors_total", "Dead letters that could not be delivered.", func() float64 { return float64(w.sourceStats().DeadLetterErrors) }),
		counter("dropped_total", "Records dropped because their shard was no longer owned.", func() float64 { return float64(w.sourceStats().Dropped) }),
		counter("keys_quarantined_total", "Keys whose stored state did not load (corrupt or poisoned): reset, the shard carried on.", func() float64 { return float64(m.quarantined.Load()) }),
		counter("keys_refused_total", "Records of new keys over state.max_keys, sent to the dead-letter destination.", func() float64 { return float64(m.keysRefused.Load()) }),
		counter("keys_expired_total", "Keys unseen for state.key_ttl, dropped with their state.", func() float64 { return float64(m.expired.Load()) }),
		counter("restores_behind_group_total", "Kafka shards restored from a checkpoint older than their consumer group's committed offset (the durable store lacks checkpoints the group committed, e.g. state.durable is each worker's own): the records between were replayed and their outputs written again.", func() float64 { return float64(m.behindGroup.Load()) }),
		counter("sink_dropped_total", "Outputs the sinks dropped instead of failing their batch (a non-finite value, a sensor id the sink's store refuses).", func() float64 { return float64(w.sinks.dropped()) }),
		gauge("owned_shards", "Shards this worker owns.", func() float64 { return float64(w.sourceStats().Owned) }),
		gauge("event_lag_seconds", "Wall clock minus the newest event time the shards held now applied (0 while none is held or none applied a record).", func() float64 {
			// The held shards' own newest event times, not the worker's:
			// a released shard's kept the gauge growing on a worker left
			// with no shard, and hid the backlog of a shard gained later.
			var ts int64
			for _, s := range w.shards() {
				ts = max(ts, s.maxTS.Load())
			}
			if ts == 0 {
				return 0
			}
			return time.Since(time.Unix(0, ts)).Seconds()
		}),
		&shardCollector{w: w, labels: labels},
	}
	if err := register(reg, cs...); err != nil {
		return nil, err
	}
	return m, nil
}

// partsReg is the registerer of the collectors of the parts the worker
// opens (the S3 store, the coordination store, the split protocol, the
// MQTT source): the worker's registry with the constant label pipeline,
// so workers of several pipelines can share one registry. Nil without
// WithMetrics.
func (w *Worker) partsReg() prometheus.Registerer {
	if w.o.reg == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": w.c.p.Name}, w.o.reg)
}

// registered is the worker's registerer (WithMetrics): it remembers what
// the worker and the parts it opens registered, so closing the worker
// unregisters them. Left registered, the collectors of a closed worker
// kept it reachable and kept serving its last values, and a new worker of
// the same pipeline on the registry (a restart in process) was refused
// as a duplicate.
type registered struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

func (r *registered) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.cs = append(r.cs, c)
	r.mu.Unlock()
	return nil
}

func (r *registered) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *registered) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cs = slices.DeleteFunc(r.cs, func(x prometheus.Collector) bool { return x == c })
	return r.reg.Unregister(c)
}

// unregisterAll unregisters everything registered through r.
func (r *registered) unregisterAll() error {
	r.mu.Lock()
	cs := r.cs
	r.cs = nil
	r.mu.Unlock()
	for _, c := range cs {
		r.reg.Unregister(c)
	}
	return nil
}

// register registers cs on reg, stopping at the first error (a name
// registered twice: two workers of one pipeline on one registry).
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// applied counts a chunk of applied records of shard s and their outputs.
func (m *metrics) applied(s *shard, records, outputs uint64, maxTS int64) {
	m.recordsIn.Add(records)
	m.recordsOut.Add(outputs)
	storeMax(&m.maxTS, maxTS)
	storeMax(&s.maxTS, maxTS)
}

// logValueLogGCErrors logs (sampled by lim) the last failed value-log GC
// of the shard's keyed state when ks counts more failures than logged
// had, and raises logged to ks's count: the counter
// (tflo_pipeline_state_value_log_gc_errors_total) said that GCs failed,
// nothing said why. The error names the state's prefix.
func logValueLogGCErrors(log *slog.Logger, lim *lograte.Limiter, shard streaming.ShardID, logged *atomic.Uint64, ks keyedstate.Stats) {
	n := ks.ValueLogGCErrors
	for {
		old := logged.Load()
		if n <= old {
			return
		}
		if logged.CompareAndSwap(old, n) {
			if ok, skipped := lim.Allow(); ok {
				log.Warn("state value-log GC failed; the shard carries on and the next GC retries",
					lograte.With(skipped, "shard", shard, "failed", n-old, "failed_total", n, "err", ks.ValueLogGCError)...)
			}
			return
		}
	}
}

// storeMax raises a to v if v is greater.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
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

// released deletes the series of a shard the worker no longer holds:
// left, every shard that ever passed through the worker kept its
// checkpoints_total and checkpoint_duration_seconds series, frozen,
// beside the held shards' (the collector's series are the held shards'
// alone).
func (m *metrics) released(shard streaming.ShardID) {
	m.checkpoints.DeleteLabelValues(string(shard))
	m.checkpointDur.DeleteLabelValues(string(shard))
}

// shardCollector reports per held shard: the checkpoint breaker's state
// (one series per state, 1 for the current one), the checkpoint failures
// and the age of the last completed checkpoint, and the keyed state's
// cached keys, memory, budget, cache capacity, keys, hits, misses and
// failed value-log GCs; per Kafka partition the consumer lag; per
// InfluxDB sink (its bucket and its index among the pipeline's sinks) its
// points, retries, rejections and breaker.
type shardCollector struct {
	w      *Worker
	labels prometheus.Labels
}

// breakerStates are the values of a breaker metric's state label.
var breakerStates = []streaming.BreakerState{streaming.BreakerClosed, streaming.BreakerHalfOpen, streaming.BreakerOpen}

var (
	descBreaker = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_checkpoint_breaker_state", "Checkpoint circuit breaker per owned shard: 1 for its current state (closed, half-open, open), 0 for the others.", []string{"shard", "state"}, l)
	}
	descFailures = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_checkpoint_failures_total", "Failed checkpoint attempts of the shard since this worker gained it.", []string{"shard"}, l)
	}
	descAge = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_checkpoint_age_seconds", "Time since the shard's last completed checkpoint (since it was gained, before the first).", []string{"shard"}, l)
	}
	descCached = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_cached_keys", "Keys of the shard held in memory by the keyed state.", []string{"shard"}, l)
	}
	descMemory = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_memory_bytes", "Memory the shard's keyed state counts against its budget (Badger's share, cache, admission sketch, write batches, changed keys).", []string{"shard"}, l)
	}
	descBudget = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_budget_bytes", "The shard's share of state.memory.", []string{"shard"}, l)
	}
	descCapacity = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_cache_capacity_keys", "Most keys the shard's cache holds now (its budget after Badger's share and the keys changed since the last checkpoint, over what one cached key costs).", []string{"shard"}, l)
	}
	descKeys = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_keys", "Keys the shard's keyed state holds, in memory and in Badger (counted from its restore).", []string{"shard"}, l)
	}
	descHits = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_cache_hits_total", "Records whose key's state was in the shard's cache, since this worker gained the shard.", []string{"shard"}, l)
	}
	descMisses = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_cache_misses_total", "Records whose key's state was read from the write-behind buffer or Badger (or was new), since this worker gained the shard.", []string{"shard"}, l)
	}
	descGCErrors = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_state_value_log_gc_errors_total", "Failed value-log garbage collections of the state database, run by the shard's keyed state after a write-behind batch (the shard carries on and the next one retries), since this worker gained the shard.", []string{"shard"}, l)
	}
	descLag = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_pipeline_kafka_consumer_lag_records", "Records of an owned Kafka partition not yet applied: its high watermark (as the last fetch saw it) minus the next offset to apply.", []string{"shard"}, l)
	}
	descInfluxPoints = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_influx_points_total", "Points the InfluxDB sink wrote and the server acknowledged.", []string{"bucket", "sink"}, l)
	}
	descInfluxRetries = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_influx_retries_total", "InfluxDB write requests that failed with a retryable error and were retried.", []string{"bucket", "sink"}, l)
	}
	descInfluxRejected = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_influx_rejected_points_total", "Points InfluxDB rejected as bad data, or the sink refused before sending.", []string{"bucket", "sink"}, l)
	}
	descInfluxBuffered = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_influx_buffered_points", "Points waiting in the InfluxDB sink (being filled or queued).", []string{"bucket", "sink"}, l)
	}
	descInfluxBreaker = func(l prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc("tflo_influx_breaker_state", "InfluxDB sink circuit breaker: 1 for its current state (closed, half-open, open), 0 for the others.", []string{"bucket", "sink", "state"}, l)
	}
)

func (c *shardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []func(prometheus.Labels) *prometheus.Desc{descBreaker, descFailures, descAge, descCached, descMemory,
		descBudget, descCapacity, descKeys, descHits, descMisses, descGCErrors, descLag, descInfluxPoints, descInfluxRetries, descInfluxRejected, descInfluxBuffered, descInfluxBreaker} {
		ch <- d(c.labels)
	}
}

func (c *shardCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.w.shards() {
		st := s.cp.Status()
		id := string(s.id)
		breakerSeries(ch, descBreaker(c.labels), st.Breaker, id)
		ch <- prometheus.MustNewConstMetric(descFailures(c.labels), prometheus.CounterValue, float64(st.Failures), id)
		since := st.LastCompletedAt
		if since.IsZero() {
			since = s.since
		}
		ch <- prometheus.MustNewConstMetric(descAge(c.labels), prometheus.GaugeValue, time.Since(since).Seconds(), id)
		stateSeries(ch, c.labels, id, s.rt.Stats())
	}
	if c.w.kafka != nil {
		for p, lag := range c.w.kafka.src.Lag() {
			ch <- prometheus.MustNewConstMetric(descLag(c.labels), prometheus.GaugeValue, float64(lag), string(streaming.KafkaShard(p.Topic, p.Partition)))
		}
	}
	for i, s := range c.w.sinks.sinks {
		is, ok := s.(*influx.OutputSink)
		if !ok {
			continue
		}
		// The sink's index tells apart sinks of buckets of one name (on
		// two servers): series with equal labels fail the whole gather.
		st, b, n := is.Stats(), is.Bucket(), strconv.Itoa(i)
		ch <- prometheus.MustNewConstMetric(descInfluxPoints(c.labels), prometheus.CounterValue, float64(st.Points), b, n)
		ch <- prometheus.MustNewConstMetric(descInfluxRetries(c.labels), prometheus.CounterValue, float64(st.Retries), b, n)
		ch <- prometheus.MustNewConstMetric(descInfluxRejected(c.labels), prometheus.CounterValue, float64(st.Rejected+st.Refused), b, n)
		ch <- prometheus.MustNewConstMetric(descInfluxBuffered(c.labels), prometheus.GaugeValue, float64(st.Buffered), b, n)
		for _, state := range breakerStates {
			v := 0.0
			if state.String() == st.Breaker {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descInfluxBreaker(c.labels), prometheus.GaugeValue, v, b, n, state.String())
		}
	}
}

// breakerSeries sends one series per breaker state, 1 for the current.
// stateSeries reports a shard's keyed-state series from its runtime's
// Stats.
func stateSeries(ch chan<- prometheus.Metric, l prometheus.Labels, shard string, ks keyedstate.Stats) {
	ch <- prometheus.MustNewConstMetric(descCached(l), prometheus.GaugeValue, float64(ks.Cached), shard)
	ch <- prometheus.MustNewConstMetric(descMemory(l), prometheus.GaugeValue, float64(ks.MemoryBytes()), shard)
	ch <- prometheus.MustNewConstMetric(descBudget(l), prometheus.GaugeValue, float64(ks.Budget), shard)
	ch <- prometheus.MustNewConstMetric(descCapacity(l), prometheus.GaugeValue, float64(ks.Capacity), shard)
	ch <- prometheus.MustNewConstMetric(descKeys(l), prometheus.GaugeValue, float64(ks.Keys), shard)
	ch <- prometheus.MustNewConstMetric(descHits(l), prometheus.CounterValue, float64(ks.Hits), shard)
	ch <- prometheus.MustNewConstMetric(descMisses(l), prometheus.CounterValue, float64(ks.Misses), shard)
	ch <- prometheus.MustNewConstMetric(descGCErrors(l), prometheus.CounterValue, float64(ks.ValueLogGCErrors), shard)
}

func breakerSeries(ch chan<- prometheus.Metric, d *prometheus.Desc, cur streaming.BreakerState, shard string) {
	for _, state := range breakerStates {
		v := 0.0
		if state == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, shard, state.String())
	}
}
