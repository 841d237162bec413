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
	"os"

	"github.com/tflo-io/tflo/internal/portal"
)

func main() { os.Exit(portal.RunMain(portal.CentralMain(), os.Args[1:], os.Stderr)) }
