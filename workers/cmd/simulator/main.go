// Command simulator publishes a seeded fleet of synthetic sensors to MQTT
// (noise, drift, injected anomalies and a share of malformed payloads):
// the input of iot-portal's edge gateway.
//
//	simulator --config deploy/simulator.yaml
//	simulator --help   # every key and its TFLO_* variable
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/workers/simulator"
)

func main() { os.Exit(worker.RunMain(Main(), os.Args[1:], os.Stderr)) }

// Main is the simulator's main.
func Main() worker.Main {
	cfg := &simulator.MainConfig{}
	return worker.Main{
		Name:    "simulator",
		Summary: "a seeded fleet of synthetic sensors publishing readings to MQTT",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			s, err := simulator.NewProcess(*cfg, log, reg)
			if err != nil {
				return err
			}
			return s.Run(ctx, nil)
		},
	}
}
