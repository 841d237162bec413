// Command edge is iot-portal's edge gateway: it consumes sensor readings
// from MQTT (QoS 2, deduplicated), conditions them per sensor (SMA →
// hysteresis → confirmed threshold cross), publishes typed alarm signals
// to Kafka keyed by sensor id, dead-letters malformed payloads to an MQTT
// topic, and checkpoints its state and MQTT cursor to Badger.
//
//	edge --config deploy/edge.yaml
//	edge --help        # every key and its TFLO_* variable
//
// The wiring lives in internal/portal (shared with `starter demo`).
package main

import (
	"os"

	"github.com/tflo-io/tflo/internal/portal"
)

func main() { os.Exit(portal.RunMain(portal.EdgeMain(), os.Args[1:], os.Stderr)) }
