package worker

import (
	"log/slog"
	"math"
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
// past the budget. Then it holds the Go memory limit against the
// container's (checkContainerLimit).
func applyMemoryLimit(budget int64, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v, "state_memory", pipeline.ByteSize(budget).String())
	} else {
		limit := memoryLimit(budget)
		debug.SetMemoryLimit(limit)
		log.Info("Go memory limit set from state.memory (GOMEMLIMIT overrides it)", "limit", pipeline.ByteSize(limit).String(), "state_memory", pipeline.ByteSize(budget).String())
	}
	lim, ok := containerMemoryLimit(os.DirFS("/"))
	checkContainerLimit(lim, ok, debug.SetMemoryLimit(-1), log)
}

// checkContainerLimit logs the container's memory limit, when the process
// has one, beside the Go memory limit goLimit: a warning when the Go
// limit is not below it (the kernel can kill the process before the
// collector holds its heap back), else what it leaves beyond the Go
// limit, which is what the kernel's page cache of Badger's files gets
// (the limit counts it): a cache miss whose pages it does not hold reads
// the disk.
func checkContainerLimit(lim containerLimit, ok bool, goLimit int64, log *slog.Logger) {
	if !ok {
		return
	}
	attrs := []any{"container_limit", pipeline.ByteSize(lim.bytes).String(), "from", lim.file}
	if goLimit == math.MaxInt64 {
		attrs = append(attrs, "go_limit", "none")
	} else {
		attrs = append(attrs, "go_limit", pipeline.ByteSize(goLimit).String())
	}
	if goLimit >= lim.bytes {
		log.Warn("the Go memory limit is not below the container's memory limit: the kernel can kill the worker "+
			"before Go's collector holds the heap back; give the container more memory, or lower state.memory (or GOMEMLIMIT)", attrs...)
		return
	}
	log.Info("container memory limit: what it leaves beyond the Go memory limit holds the page cache of Badger's files; "+
		"a state cache miss whose file pages are not in it reads the disk",
		append(attrs, "page_cache_room", pipeline.ByteSize(lim.bytes-goLimit).String())...)
}
