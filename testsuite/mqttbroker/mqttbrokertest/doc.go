// Package mqttbrokertest starts the in-process MQTT broker
// (testsuite/mqttbroker) for a test and stops it at the test's end:
//
//	b := mqttbrokertest.Start(t, mqttbroker.Options{})
//	url := b.URL() // mqtt://127.0.0.1:<port>
//
// It is apart from mqttbroker because it takes a testing.TB, and
// mqttbroker is also built into the starter (`starter demo`, through
// internal/devstack): only tests import this package.
//
// Concurrency: Start may be called from parallel tests; the Broker is
// mqttbroker's, safe for concurrent use.
package mqttbrokertest
