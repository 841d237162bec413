// Package temporalclient is the one Temporal connection configuration of
// every tflo binary: starter's flags and the workers' YAML both fill a
// Config, and Resolve turns it into the connection a client dials — a
// local dev server, a self-hosted cluster or a cloud namespace.
//
// It speaks the Temporal CLI's language (through
// go.temporal.io/sdk/contrib/envconfig): a setting not given in the Config
// comes from the CLI's environment variable (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH, ...),
// else from the selected profile of the CLI's TOML config file (--profile,
// --config-file, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE), else from the
// default. Config's keys mirror the CLI's flags (tls_cert_path is
// --tls-cert-path).
//
// Errors name where the bad value came from, as the user typed it: the
// flag (--tls-cert-path) or YAML key (temporal.tls_cert_path, with
// Config.KeyPath), the variable, or "profile.<name>.<key> in <file>"
// (Resolved.Source). The API key is never a key or a flag value: it comes
// from APIKeyFile, TEMPORAL_API_KEY or the profile, and never appears in
// String or in errors; neither does TLS key material (internal/tlsconfig
// builds the TLS settings).
//
// Observability of the slow path: WithMetrics sends the SDK's metrics into
// a Prometheus registry (PrometheusMetrics; schedule-to-start latency is
// the one operators alert on: a worker that stops picking its tasks up),
// and WithTracing adds the OpenTelemetry tracing interceptor, so a
// checkpoint round is one trace from the coordinator to every worker's
// share. Both are safe for concurrent use.
//
// Main types: Config (plain data, json/yaml tags), Resolved (the effective
// connection: Options, Dial, String, Source). Concurrency: both are values;
// Resolve reads the environment and files and shares no state.
package temporalclient
