// Package portal wires the iot-portal reference deployment out of tflo's
// libraries, once, for every way it runs: the worker mains in
// workers/cmd (one process each), `starter demo` (everything in one
// process over internal/devstack's embedded services) and the end-to-end
// test in testsuite/e2e.
//
// # Main types
//
//   - [EdgeConfig], [CentralConfig], [SimulatorConfig]: the serializable
//     configuration of each worker (YAML file, then TFLO_* environment
//     overrides by internal/envconfig's rule; Validate after defaults).
//   - [Edge]: the edge gateway (MQTT source → workers/edge pipeline →
//     Kafka publisher) with Badger checkpoints and Prometheus metrics.
//   - [NewCentral]: a workers/central Worker from a CentralConfig (with
//     an optional shared durable store: a folder or S3).
//   - [Simulator]: the sensor fleet publishing to MQTT.
//   - [BackfillWorker]: a Temporal worker on workflows.BackfillTaskQueue
//     replaying file:// and s3:// archives into the sinks the backfill
//     input names ([ParseSink]: InfluxDB buckets, or Kafka topics keyed by
//     sensor, [KafkaRowSink]).
//   - [Stack]: the whole portal on one machine ([StartStack]).
//   - [ServeMetrics]: the /metrics endpoint of a registry.
//
// # Concurrency
//
// Each Run owns the goroutines it starts and returns when they have
// stopped; Stats methods are safe to call concurrently with Run. A Stack
// owns its services and workers; Close stops them in reverse order of
// start (workers drain and checkpoint before the services go away).
package portal
