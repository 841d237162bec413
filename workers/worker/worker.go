// Package worker is tflo's worker program (workers/cmd/worker) as a
// library, for a worker binary of your own: one whose specs may name
// operator types that are not in tflo's catalogs, and decoders and sinks
// of your own. Register operators in pipeline.DefaultRegistry, decoders
// and sinks with pipeline.RegisterDecoder and pipeline.RegisterSink, then
// call Main; the program is the shipped worker — the same flags, config
// keys and TFLO_* variables, metrics and probes, drain and final
// checkpoints on SIGTERM — with yours beside tflo's (`--check` resolves a
// spec against them too, `--operators` lists them).
//
//	func main() {
//		if err := myops.Register(pipeline.DefaultRegistry()); err != nil {
//			log.Fatal(err)
//		}
//		os.Exit(worker.Main(os.Args[1:]))
//	}
//
// workers/examples/anomaly is such a program, with its spec. For what a
// spec cannot say at all (a graph built in Go, a sink value made in Go),
// EditPipeline changes the loaded pipeline before it runs.
package worker

import (
	"os"
	"path/filepath"

	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
)

// Main runs the worker with args (the command line without the program
// name: --pipeline FILE.yaml, --config FILE, ...; --help lists them) until
// SIGINT or SIGTERM, writing its log and errors to stderr, and returns
// the process's exit code: 0, 1 when the worker failed, 2 for a usage
// error (a bad flag, config or spec); a second signal while it drains
// exits the process at once with 130. Its help, errors, --version and
// log lines (cmd=) carry the program's name. Main owns the process: unless
// GOMEMLIMIT is set, it sets the Go memory limit from the spec's
// state.memory, and logs the container's memory limit beside it.
func Main(args []string, opts ...Option) int {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m := worker.PipelineMain(o.edits...)
	m.OwnsProcess = true
	if len(os.Args) > 0 && os.Args[0] != "" {
		m.Name = filepath.Base(os.Args[0]) // the program's name in its help, errors, --version and logs (cmd=)
	}
	return worker.RunMain(m, args, os.Stderr)
}

// Exit codes of Main.
const (
	ExitOK      = worker.ExitOK
	ExitFailure = worker.ExitFailure
	ExitUsage   = worker.ExitUsage
)

// Option changes what Main runs.
type Option func(*options)

type options struct {
	edits []func(*pipeline.Pipeline) error
}

// EditPipeline has Main call edit with the pipeline it loaded from the
// spec (--pipeline), before the pipeline is checked (--check) and run:
// for what a spec cannot say, such as a graph built in Go, or a decoder
// or a sink made in Go (Pipeline.Decoder; pipeline.Use in Pipeline.Sinks
// or DeadLetter) rather than registered by name
// (pipeline.RegisterDecoder, pipeline.RegisterSink). An error from edit
// stops Main with a usage error (exit code 2); so does a pipeline that
// edit left invalid. Several edits run in order. --print-config ends
// with what they made (Go values have no keys: it names their types).
//
// The edits run on a spec that loads: their problems come in one error
// with the worker config's, but a spec's own problems come first, and
// the edits' once those are fixed.
func EditPipeline(edit func(p *pipeline.Pipeline) error) Option {
	return func(o *options) { o.edits = append(o.edits, edit) }
}
