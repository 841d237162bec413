// Package mosquittotest starts a real Mosquitto broker (Debian's
// mosquitto 2.x, MQTT v5) for tests: a loopback port, anonymous access,
// sessions in memory, stopped at test end.
//
//	b := mosquittotest.Start(t)   // skips when mosquitto is absent
//	url := b.URL()                // mqtt://127.0.0.1:<port>
//
// Binary lookup: $TFLO_MOSQUITTO, else mosquitto on PATH (/usr/sbin is
// searched too: Debian installs it there). When it is missing the test is
// skipped with a message saying how to install it (`apt-get install
// mosquitto`), unless TFLO_REQUIRE_SERVICES=1 (set by `make test`), which
// turns the skip into a failure.
//
// Mosquitto sends a client that announces no Receive Maximum at most
// max_inflight_messages (20 by default; Options.MaxInflight changes it)
// unacknowledged QoS 1/2 messages; an MQTT v5 client that announces one
// gets that many instead, whatever max_inflight_messages says. Debian's
// 2.0.11 keeps to the window only until the first acknowledgements: 20
// acknowledged of a window of 20 let about 400 out (a fault of its
// in-flight quota, as in eclipse-mosquitto/mosquitto#2301), so only the
// first stall of a held stream is at the window.
//
// Concurrency: a Broker's methods are safe for concurrent use.
package mosquittotest
