package temporalclient

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// TimerBuckets are the histogram buckets (seconds) of the SDK's timers:
// 1ms to about 65s. Schedule-to-start latency — the one to alert on: a
// worker that stops picking its tasks up — lives in the low buckets when
// healthy.
var TimerBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// PrometheusMetrics sends the Temporal SDK's metrics (client.Options
// MetricsHandler) into a Prometheus registry, under the SDK's names as its
// own Prometheus naming (contrib/tally's NewPrometheusNamingScope) and
// Temporal's dashboards have them: counters as counters with "_total"
// appended (temporal_request becomes temporal_request_total), gauges as
// gauges, timers as histograms in seconds with "_seconds" appended
// (temporal_activity_schedule_to_start_latency becomes
// temporal_activity_schedule_to_start_latency_seconds). The SDK
// tags each metric (namespace, task_queue, activity_type, ...); a metric's
// labels are the union of the tags it was recorded with, empty where a
// series lacks one.
//
// Safe for concurrent use.
type PrometheusMetrics struct {
	reg *registry
}

var _ client.MetricsHandler = PrometheusMetrics{}

// NewPrometheusMetrics registers the SDK's metrics in reg and returns the
// handler to set as client.Options.MetricsHandler.
func NewPrometheusMetrics(reg prometheus.Registerer) (PrometheusMetrics, error) {
	r := &registry{families: map[string]*family{}}
	if err := reg.Register(r); err != nil {
		return PrometheusMetrics{}, fmt.Errorf("temporal SDK metrics: register in prometheus: %w", err)
	}
	return PrometheusMetrics{reg: r}, nil
}

// WithMetrics sets opts.MetricsHandler to a PrometheusMetrics over reg.
func WithMetrics(opts client.Options, reg prometheus.Registerer) (client.Options, error) {
	h, err := NewPrometheusMetrics(reg)
	if err != nil {
		return opts, err
	}
	opts.MetricsHandler = h
	return opts, nil
}

// WithTags implements client.MetricsHandler.
func (p PrometheusMetrics) WithTags(tags map[string]string) client.MetricsHandler {
	return tagged{reg: p.reg, tags: maps.Clone(tags)}
}

// Counter implements client.MetricsHandler.
func (p PrometheusMetrics) Counter(name string) client.MetricsCounter {
	return tagged{reg: p.reg}.Counter(name)
}

// Gauge implements client.MetricsHandler.
func (p PrometheusMetrics) Gauge(name string) client.MetricsGauge {
	return tagged{reg: p.reg}.Gauge(name)
}

// Timer implements client.MetricsHandler.
func (p PrometheusMetrics) Timer(name string) client.MetricsTimer {
	return tagged{reg: p.reg}.Timer(name)
}

type tagged struct {
	reg  *registry
	tags map[string]string
}

func (t tagged) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(t.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, tags)
	return tagged{reg: t.reg, tags: merged}
}

func (t tagged) Counter(name string) client.MetricsCounter {
	// A counter's name ends in _total (Prometheus's convention): the bare
	// SDK names (temporal_request) matched none of Temporal's dashboards.
	if !strings.HasSuffix(name, "_total") {
		name += "_total"
	}
	return t.reg.series(name, kindCounter, t.tags)
}

func (t tagged) Gauge(name string) client.MetricsGauge { return t.reg.series(name, kindGauge, t.tags) }

func (t tagged) Timer(name string) client.MetricsTimer {
	return t.reg.series(name+"_seconds", kindTimer, t.tags)
}

type kind int

const (
	kindCounter kind = iota
	kindGauge
	kindTimer
)

// registry is the prometheus.Collector holding every SDK metric. It is
// unchecked (Describe sends nothing): the SDK's metric set is not known up
// front.
type registry struct {
	mu       sync.Mutex
	families map[string]*family
}

type family struct {
	name   string
	kind   kind
	labels map[string]bool // every tag name seen
	series map[string]*series
}

type series struct {
	tags map[string]string

	mu      sync.Mutex
	value   float64 // counter or gauge
	count   uint64  // timer
	sum     float64
	buckets []uint64 // cumulative counts per TimerBuckets bound
}

// Inc implements client.MetricsCounter.
func (s *series) Inc(d int64) {
	s.mu.Lock()
	s.value += float64(d)
	s.mu.Unlock()
}

// Update implements client.MetricsGauge.
func (s *series) Update(v float64) {
	s.mu.Lock()
	s.value = v
	s.mu.Unlock()
}

// Record implements client.MetricsTimer.
func (s *series) Record(d time.Duration) {
	v := d.Seconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	s.sum += v
	for i, b := range TimerBuckets {
		if v <= b {
			s.buckets[i]++
		}
	}
}

// seriesKey identifies a series by its tags. A tag with an empty value is
// left out: Prometheus has no empty label (Collect fills a label a series
// lacks with ""), so tags {a: x} and {a: x, b: ""} are one series; kept
// apart, they were collected twice with the same labels and the whole
// /metrics scrape failed.
func seriesKey(tags map[string]string) string {
	keys := slices.Sorted(maps.Keys(tags))
	var b strings.Builder
	for _, k := range keys {
		if tags[k] == "" {
			continue
		}
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(tags[k])
		b.WriteByte(0)
	}
	return b.String()
}

func (r *registry) series(name string, k kind, tags map[string]string) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.families[name]
	if f == nil {
		f = &family{name: name, kind: k, labels: map[string]bool{}, series: map[string]*series{}}
		r.families[name] = f
	}
	key := seriesKey(tags)
	s := f.series[key]
	if s == nil {
		s = &series{tags: maps.Clone(tags)}
		if k == kindTimer {
			s.buckets = make([]uint64, len(TimerBuckets))
		}
		f.series[key] = s
		for t := range tags {
			f.labels[t] = true
		}
	}
	return s
}

// Describe implements prometheus.Collector (unchecked).
func (r *registry) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (r *registry) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	fams := make([]*family, 0, len(r.families))
	for _, f := range r.families {
		fams = append(fams, f)
	}
	type snap struct {
		f      *family
		labels []string
		series []*series
	}
	snaps := make([]snap, 0, len(fams))
	for _, f := range fams {
		labels := slices.Sorted(maps.Keys(f.labels))
		ss := make([]*series, 0, len(f.series))
		for _, s := range f.series {
			ss = append(ss, s)
		}
		snaps = append(snaps, snap{f, labels, ss})
	}
	r.mu.Unlock()
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].f.name < snaps[j].f.name })
	for _, sn := range snaps {
		desc := prometheus.NewDesc(sn.f.name, "Temporal SDK metric "+sn.f.name+".", sn.labels, nil)
		for _, s := range sn.series {
			values := make([]string, len(sn.labels))
			for i, l := range sn.labels {
				values[i] = s.tags[l]
			}
			s.mu.Lock()
			var m prometheus.Metric
			var err error
			switch sn.f.kind {
			case kindCounter:
				m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, s.value, values...)
			case kindGauge:
				m, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.value, values...)
			case kindTimer:
				b := make(map[float64]uint64, len(TimerBuckets))
				for i, bound := range TimerBuckets {
					b[bound] = s.buckets[i]
				}
				m, err = prometheus.NewConstHistogram(desc, s.count, s.sum, b, values...)
			}
			s.mu.Unlock()
			if err != nil {
				m = prometheus.NewInvalidMetric(desc, err)
			}
			ch <- m
		}
	}
}
