// Package tlsconfig is the one place that turns PEM material into a client
// *tls.Config: the CA to verify servers with, an optional client
// certificate and key (mutual TLS), and an optional server name, with TLS
// 1.2 as the minimum version. Every client the project dials with TLS
// builds its configuration here: Kafka (connectors/kafka Security), MQTT,
// S3, InfluxDB and Temporal (internal/temporalclient and the central
// worker's Temporal settings).
//
// Config is plain data with YAML and JSON keys (ca_file, cert_file,
// key_file, server_name), so a configuration file can embed it; PEM bytes
// given in code win over the files. Build returns the tls.Config; Apply
// lays the same settings over a tls.Config the caller already has.
//
// Errors name the setting and the file and say what is wrong with it
// ("ca_file \"/etc/ca.pem\" holds no PEM certificate"); they never carry
// key material. Keys lets a caller whose settings have other names (a
// flag, another YAML key) have those names in the messages.
//
// Concurrency: Config is a value; Build and Apply read files and share no
// state, so they are safe to call from any goroutine.
package tlsconfig
