// Package chaos runs tflo's shipped workers as separate processes — the
// worker binary built from workers/cmd/worker with the shipped pipeline
// specs — against real brokers, kills them with SIGKILL at seeded random
// points, and compares what they produced with a crash-free run of the
// same binary over the same input.
//
// TestEdgeSIGKILLExactlyOnce: the iot-portal edge (MQTT QoS 2 → keyed
// graph → signals on Kafka, kfake in process) is killed three times while
// a QoS 2 publisher runs, on mochi-mqtt (in process) and on Mosquitto
// (Debian's, skipped when absent unless TFLO_REQUIRE_SERVICES=1). Every
// reading must be applied exactly once: the distinct signals on Kafka
// equal the crash-free run's, none differs and none is missing (the Kafka
// sink is at-least-once, so a signal replayed after a kill may appear
// twice, identical; the test counts those). The seed is logged; set
// TFLO_CHAOS_SEED to replay one.
//
// TestPortalFaults: the iot-portal's central workers (two processes
// sharing a durable folder, kfake, a real influxd) through a SIGKILL of
// one of them at a random point (restarted at once) and influxd stopped
// for 20s while records arrive. After each fault committed lag returns to
// 0 (the table's recovery seconds), and at the end every InfluxDB point
// equals a crash-free run's: 0 missing, 0 differing, 0 extra. It logs the
// fault table.
//
// `make test` runs each once (about 2 minutes together); `make chaos`
// runs them repeatedly with fresh seeds (CHAOS_COUNT, default 5). Not
// covered yet (issue 16 item 9): kills of the edge and of central during a
// restore, the S3 server and the coordination store cut, the Temporal dev
// server restarted, duplicate archive rows read by an independent reader.
//
// The tests build the worker binary once per run (go build, about a
// minute cold).
package chaos
