// Package temporalclient holds the connection settings every tflo binary
// uses to reach Temporal — a local dev server, a self-hosted cluster or a
// cloud namespace — and dials a client from them.
//
// Config is a plain struct (json/yaml tags) so it can come from a YAML
// file, flags or the environment (FromEnv reads the TEMPORAL_* variables
// the Temporal CLI uses). The API key and TLS key never appear in String
// or in errors.
//
// Observability of the slow path: WithMetrics sends the SDK's metrics into
// a Prometheus registry (PrometheusMetrics; schedule-to-start latency is
// the one operators alert on: a worker that stops picking its tasks up),
// and WithTracing adds the OpenTelemetry tracing interceptor, so a
// checkpoint round is one trace from the coordinator to every worker's
// share. Both are safe for concurrent use.
package temporalclient
