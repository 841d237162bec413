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
	"context"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/internal/portal"
)

func main() {
	var cfg portal.EdgeConfig
	os.Exit(portal.RunMain(portal.Main{
		Name:    "edge",
		Summary: "MQTT sensor readings → SMA/hysteresis/threshold-cross per sensor → Kafka signals",
		Config:  &cfg,
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			e, err := portal.NewEdge(ctx, cfg, log, reg)
			if err != nil {
				return err
			}
			return e.Run(ctx)
		},
	}, os.Args[1:], os.Stderr))
}
