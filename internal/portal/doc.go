// Package portal runs the iot-portal reference deployment on one machine,
// for `starter demo` and the end-to-end test: the embedded services of
// internal/devstack (Kafka protocol, MQTT broker, Temporal dev server,
// InfluxDB), the pipeline workers of iot-portal's specs
// (workers/pipelines: the edge gateway and the central workers) and the
// sensor simulator, all in one process.
//
// The production binaries do not import this package (it links the
// embedded services): they are workers/cmd/worker with the same specs, and
// workers/cmd/simulator.
//
// # Main types
//
//   - [Stack]: the whole portal ([StartStack]); [Stack.EdgePipeline] and
//     [Stack.CentralPipeline] are the pipeline values its workers run, as
//     loaded from the specs with the stack's addresses.
//   - [StackStats]: its progress.
//
// # Concurrency
//
// A Stack owns its services and workers; Close stops them in reverse
// order of start (workers drain and checkpoint before the services go
// away). Stats is safe to call concurrently.
package portal
