package worker

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/tflo-io/tflo/pipeline"
)

// memoryLimit is the Go memory limit of a worker process whose pipeline's
// state has budget bytes (state.memory): the budget, which leaves a third
// of itself to the garbage collector, plus room for what it does not
// cover (records and outputs in flight, the sinks' buffers, the Kafka,
// MQTT and Temporal clients): half the budget, at least 128 MiB.
func memoryLimit(budget int64) int64 { return budget + max(budget/2, 128<<20) }

// applyMemoryLimit sets the process's Go memory limit to
// memoryLimit(budget) unless GOMEMLIMIT sets one, and logs which applies:
// without a limit the collector lets the heap grow to twice what is live,
// past the budget.
func applyMemoryLimit(budget int64, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v, "state_memory", pipeline.ByteSize(budget).String())
		return
	}
	limit := memoryLimit(budget)
	debug.SetMemoryLimit(limit)
	log.Info("Go memory limit set from state.memory (GOMEMLIMIT overrides it)", "limit", pipeline.ByteSize(limit).String(), "state_memory", pipeline.ByteSize(budget).String())
}
