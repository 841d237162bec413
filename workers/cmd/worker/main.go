// Command worker runs any tflo pipeline from its YAML spec: a Kafka or
// MQTT source, the keyed graph of registered operators, its sinks, its
// state and checkpoints, with the slow path on Temporal when configured.
// Run several with distinct worker ids on one Kafka pipeline: they share
// its partitions. Unless GOMEMLIMIT is set, the process's Go memory limit
// is the spec's state.memory plus half of it (at least 128 MiB) for
// what the budget does not cover; in a container with a memory limit it
// logs that limit beside it, and warns when the Go limit is not below it.
//
//	worker --pipeline workers/pipelines/sma-readings.yaml
//	worker --pipeline spec.yaml --config worker.yaml   # worker id, Temporal, NATS, metrics, logs
//	worker --pipeline spec.yaml --check                # load and check the spec only
//	worker --operators                                 # the operator types a spec may name
//	worker --version                                   # which build this is
//	worker --help                                      # every key and its TFLO_* variable
//
// A worker with operators of your own is a program of a few lines around
// package workers/worker.
package main

import (
	"os"

	"github.com/tflo-io/tflo/workers/worker"
)

func main() { os.Exit(worker.Main(os.Args[1:])) }
