// Package workers holds the iot-portal reference deployment's workers:
//
//   - workers/edge: the edge gateway as a library (MQTT → conditioning
//     graph → Kafka signals, Badger checkpoints).
//   - workers/central: the central worker as a library (Kafka consumer
//     group → derived signals → InfluxDB and Parquet, Temporal slow path).
//   - workers/simulator: a seeded sensor fleet publishing to MQTT.
//   - workers/cmd/{edge,central,simulator}: their thin mains (YAML config
//     with TFLO_* environment overrides, slog, Prometheus /metrics,
//     graceful shutdown), wired by internal/portal.
//
// `starter demo` runs them all in one process; docker-compose.yml runs the
// mains against real services.
package workers
