// Command central is an iot-portal central worker: a Kafka consumer-group
// member that turns the edge's signals of the partitions it owns into
// derived signals per sensor (rolling mean/min/max, alarm episodes) with
// Badger state, writes them to InfluxDB and the Parquet archive, and
// serves its shards' checkpoint, handoff and lease activities on its own
// Temporal task queue (and, with temporal.control_worker, the workflows).
// Run several with distinct worker_id values; they share the partitions.
//
//	central --config deploy/central.yaml
//	central --help     # every key and its TFLO_* variable
//
// The wiring lives in internal/portal and workers/central.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/internal/portal"
	"github.com/tflo-io/tflo/workers/central"
)

func main() {
	cfg := portal.CentralConfig{Config: central.DefaultConfig()}
	os.Exit(portal.RunMain(portal.Main{
		Name:    "central",
		Summary: "Kafka signals → derived signals per sensor → InfluxDB + Parquet archive, checkpoints driven by Temporal",
		Config:  &cfg,
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			w, closeDurable, err := portal.NewCentral(ctx, cfg, log, reg)
			if err != nil {
				return err
			}
			defer closeDurable()
			stopBackfill, err := portal.StartBackfill(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer stopBackfill()
			return w.Run(ctx)
		},
	}, os.Args[1:], os.Stderr))
}
