// Command simulator publishes a seeded fleet of synthetic sensors to MQTT
// (noise, drift, injected anomalies and a share of malformed payloads):
// the input of iot-portal's edge gateway.
//
//	simulator --config deploy/simulator.yaml
//	simulator --help   # every key and its TFLO_* variable
package main

import (
	"os"

	"github.com/tflo-io/tflo/internal/portal"
)

func main() { os.Exit(portal.RunMain(portal.SimulatorMain(), os.Args[1:], os.Stderr)) }
