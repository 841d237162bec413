// Command worker runs any tflo pipeline from its YAML spec: a Kafka or
// MQTT source, the keyed graph of registered operators, its sinks, its
// state and checkpoints, with the slow path on Temporal when configured.
// Run several with distinct worker ids on one Kafka pipeline: they share
// its partitions.
//
//	worker --pipeline workers/pipelines/sma-readings.yaml
//	worker --pipeline spec.yaml --config worker.yaml   # worker id, Temporal, NATS, metrics, logs
//	worker --pipeline spec.yaml --check                # load and check the spec only
//	worker --version                                   # which build this is
//	worker --help                                      # every key and its TFLO_* variable
package main

import (
	"os"

	"github.com/tflo-io/tflo/internal/worker"
)

func main() { os.Exit(worker.RunMain(worker.PipelineMain(), os.Args[1:], os.Stderr)) }
