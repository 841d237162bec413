// Package mqttbroker runs an in-process MQTT v5 broker (mochi-mqtt) on a
// loopback port, for tests and for `starter demo`. It allows every client
// (or only the given users) and keeps sessions in memory. Its TCP
// listener (Listener, also for tests that build their own mochi server)
// closes every connection it accepted when the server closes, and waits
// for them: mochi's own leaves a connection accepted during Close to race
// the server's wait for its clients.
//
// Concurrency: a Broker is safe for concurrent use; Close is idempotent.
package mqttbroker
