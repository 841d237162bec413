package mqtt

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusCounters registers one counter vector, <namespace>_mqtt_source_events_total
// with labels client_id and counter (a Counter's String), on reg and returns
// the CounterHook that feeds it. Registering twice on one registry returns
// the already registered vector, so several sources can share it.
func PrometheusCounters(reg prometheus.Registerer, namespace, clientID string) (CounterHook, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Subsystem: "mqtt_source",
		Name:      "events_total",
		Help:      "MQTT source events by kind: received, processed, duplicates, retained_skipped, dead_lettered, connects, ...",
	}, []string{"client_id", "counter"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("mqtt: register prometheus counters: %w", err)
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("mqtt: register prometheus counters: %w", err)
		}
		vec = existing
	}
	var byCounter [numCounters]prometheus.Counter
	for c := Counter(0); c < numCounters; c++ {
		byCounter[c] = vec.WithLabelValues(clientID, c.String())
	}
	return func(c Counter, delta uint64) {
		if c >= 0 && c < numCounters {
			byCounter[c].Add(float64(delta))
		}
	}, nil
}
