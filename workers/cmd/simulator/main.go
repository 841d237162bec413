// Command simulator publishes a seeded fleet of synthetic sensors to MQTT
// (noise, drift, injected anomalies and a share of malformed payloads):
// the input of iot-portal's edge gateway.
//
//	simulator --config deploy/simulator.yaml
//	simulator --help   # every key and its TFLO_SIMULATOR_* variable
package main

import (
	"context"
	"os"

	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/workers/simulator"
)

func main() { os.Exit(worker.RunMain(Main(), os.Args[1:], os.Stderr)) }

// Main is the simulator's main.
func Main() worker.Main {
	cfg := &simulator.MainConfig{}
	return worker.Main{
		Name:     "simulator",
		Prefix:   worker.SimulatorPrefix,
		Summary:  "a seeded fleet of synthetic sensors publishing readings to MQTT",
		Stopping: "SIGINT/SIGTERM stop the simulator once the publish under way completes (it has no state to save).",
		Config:   cfg,
		Run: func(ctx context.Context, rt worker.Runtime) error {
			s, err := simulator.NewProcess(*cfg, rt.Log, rt.Registry)
			if err != nil {
				return err
			}
			// Ready once connected to the broker (and while it stays
			// connected), not while it is still dialling: /readyz is the
			// container's health check.
			rt.Ready.Set(s.Ready)
			return s.Run(ctx, nil)
		},
	}
}
