// Package pipelines holds the example pipelines as YAML specs, embedded
// (FS), and the tests that pin what they compute. Run one with
//
//		worker --pipeline workers/pipelines/<name>.yaml
//
//	  - iot-portal-edge.yaml, iot-portal-central.yaml: the iot-portal
//	    reference deployment (MQTT → conditioning → Kafka signals → derived
//	    signals → InfluxDB and the archive).
//	  - sma-readings.yaml: per-sensor SMA(10) over JSON readings from Kafka
//	    back to a Kafka topic, emitting during warm-up.
//	  - market-data.yaml: trades → VWAP, RSI, Bollinger bands and an MA
//	    crossover per symbol → Kafka, InfluxDB and the archive.
package pipelines

import "embed"

// FS holds the specs, by file name.
//
//go:embed *.yaml
var FS embed.FS

// Spec returns the bytes of the spec file name.
func Spec(name string) []byte {
	b, err := FS.ReadFile(name)
	if err != nil {
		panic(err) // the names are the files of this folder: a bug
	}
	return b
}
