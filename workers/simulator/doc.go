// Package simulator publishes synthetic sensor readings to MQTT for the
// iot-portal demo and end-to-end tests: N sensors, each a baseline with
// drift and Gaussian noise, injected anomalies (spikes that cross the edge
// thresholds) and a share of malformed payloads that must reach the dead
// letter topic.
//
// Readings are generated from a seeded random source, so a run with the
// same Config produces the same readings; event time starts at Config.Start
// and advances one Interval per round (or follows the wall clock when Start
// is zero), which makes end-to-end assertions exact.
//
// Concurrency: Run owns its goroutine; Stats is safe to call concurrently.
package simulator
