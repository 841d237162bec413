// Package workers holds the thin main packages of the reference deployment:
// the edge gateway (MQTT → conditioning graph → Kafka) and the central
// worker (Kafka consumer group → keyed graph → InfluxDB and Parquet), each
// also a Temporal worker on its own task queue.
//
// Status: not built yet (see the iot-portal issue).
package workers
