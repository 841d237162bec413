// Package temporalclient holds the connection settings every tflo binary
// uses to reach Temporal — a local dev server, a self-hosted cluster or a
// cloud namespace — and dials a client from them.
//
// Config is the one Temporal client configuration: the starter CLI's
// flags and the workers' temporal section both fill it. Its keys are the
// official client configuration's (go.temporal.io/sdk/contrib/envconfig:
// address, namespace, tls.server_ca_cert_path, tls.client_cert_path, ...)
// and FromEnv reads the official TEMPORAL_* variables. The API key is
// never read from a file and never appears in String or in errors.
package temporalclient
