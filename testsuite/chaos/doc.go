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
// The tests build the worker binary once per run (go build, about a
// minute cold).
package chaos
