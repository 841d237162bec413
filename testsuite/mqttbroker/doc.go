// Package mqttbroker runs an in-process MQTT v5 broker (mochi-mqtt) on a
// loopback port, for tests and for `starter demo`. It allows every client
// (or only the given users, or a given auth ledger) and keeps sessions in
// memory unless a storage hook is given. Options add what a test needs
// beyond that — TLS, capabilities, further hooks, a listener opened only
// later — and Server is the mochi server itself, for publishing or
// subscribing as the broker. Its TCP listener (Listener) closes every
// connection it accepted when the server closes, and waits for them:
// mochi's own leaves a connection accepted during Close to race the
// server's wait for its clients. A test starts one, closed at its end,
// with mqttbrokertest.Start.
//
// Concurrency: a Broker is safe for concurrent use; Close is idempotent.
package mqttbroker
