package benchratio

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user and system) the process used so far. On a
// shared machine it measures the work done, which other processes do not
// inflate as they do wall time: benchmarks compare it across the runs of
// one process.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
