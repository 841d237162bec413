// Package temporalclient holds the connection settings every tflo binary
// uses to reach Temporal — a local dev server, a self-hosted cluster or a
// cloud namespace — and dials a client from them.
//
// Config is a plain struct (json/yaml tags) so it can come from a YAML
// file, flags or the environment (FromEnv reads the TEMPORAL_* variables
// the Temporal CLI uses). The API key and TLS key never appear in String
// or in errors.
package temporalclient
