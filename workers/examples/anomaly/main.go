// Command anomaly is a worker binary with an operator of its own, the
// pattern for yours: zscore (zscore.go) is an ordinary streaming.Operator,
// declared as a streaming.OperatorType and registered in
// pipeline.DefaultRegistry before workers/worker's Main runs, so the spec
// anomaly.yaml names it like any catalog operator. Everything else is
// the shipped worker: the same flags, config and TFLO_* variables,
// metrics, checkpoints and drain.
//
//	go build -o bin/ ./workers/examples/anomaly
//	bin/anomaly --pipeline workers/examples/anomaly/anomaly.yaml --check
//	KAFKA_BROKERS=localhost:9092 STATE_DIR=/tmp/anomaly bin/anomaly --pipeline workers/examples/anomaly/anomaly.yaml
//
// The stock worker refuses the spec: `unknown operator type "zscore"`.
package main

import (
	"fmt"
	"os"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/workers/worker"
)

func main() {
	if err := pipeline.DefaultRegistry().Register(ZScoreType); err != nil {
		fmt.Fprintln(os.Stderr, "anomaly:", err)
		os.Exit(worker.ExitFailure)
	}
	os.Exit(worker.Main(os.Args[1:]))
}
