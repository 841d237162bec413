// Package mqttbroker runs an in-process MQTT v5 broker (mochi-mqtt) on a
// loopback port, for tests and for `starter demo`. It allows every client
// (or only the given users) and keeps sessions in memory.
//
// Concurrency: a Broker is safe for concurrent use; Close is idempotent.
package mqttbroker
