// Command anomaly is a worker binary with an operator and a sink of its
// own, the pattern for yours: zscore (zscore.go) is an ordinary
// streaming.Operator, declared as a streaming.OperatorType and registered
// in pipeline.DefaultRegistry, and alerts (alerts.go) a sink registered
// with pipeline.RegisterSink, both before workers/worker's Main runs, so
// the spec anomaly.yaml names them like tflo's own operators and sinks (a
// decoder of your own registers likewise, with pipeline.RegisterDecoder).
// Everything else is the shipped worker: the same flags, config and
// TFLO_* variables, metrics, checkpoints and drain.
//
//	go build -o bin/ ./workers/examples/anomaly
//	bin/anomaly --pipeline workers/examples/anomaly/anomaly.yaml --check
//	KAFKA_BROKERS=localhost:9092 STATE_DIR=/tmp/anomaly ALERTS_FILE=/tmp/anomaly/alerts.jsonl bin/anomaly --pipeline workers/examples/anomaly/anomaly.yaml
//
// (ALERTS_FILE: the spec's default, /var/lib/tflo/anomaly/alerts.jsonl,
// is in a folder the sink does not create.)
//
// The stock worker refuses the spec: `sinks[1].alerts: unknown key (known
// here: kafka, influx, archive)`, and, without that sink, `unknown
// operator type "zscore"`.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/workers/worker"
)

func main() {
	if err := errors.Join(pipeline.DefaultRegistry().Register(ZScoreType), pipeline.RegisterSink(AlertsType)); err != nil {
		fmt.Fprintln(os.Stderr, "anomaly:", err)
		os.Exit(worker.ExitFailure)
	}
	os.Exit(worker.Main(os.Args[1:]))
}
