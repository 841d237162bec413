// Package benchratio reports a benchmark's cost as a ratio against a
// baseline measured in the same process, so speed targets ("within 3× of a
// hand-written loop") are judged on one machine at one moment instead of
// against absolute numbers from somewhere else.
//
// Concurrency: Report may be called from any benchmark; baselines are
// measured once per process and cached by name under a lock.
package benchratio

import (
	"sync"
	"testing"
)

var (
	mu        sync.Mutex
	baselines = map[string]testing.BenchmarkResult{}
)

// Report measures baseline (once per process, cached under name) and adds
// the metric "x-<name>" to b: b's ns/op divided by the baseline's. Call it
// after b's timed loop.
func Report(b *testing.B, name string, baseline func(*testing.B)) {
	b.Helper()
	if b.N == 0 {
		return
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	base := Baseline(name, baseline)
	if base.N == 0 || base.T <= 0 {
		return
	}
	basePer := float64(base.T.Nanoseconds()) / float64(base.N)
	if basePer <= 0 {
		return
	}
	b.ReportMetric(per/basePer, "x-"+name)
}

// Baseline runs (once per process) and returns the baseline benchmark
// registered under name.
func Baseline(name string, baseline func(*testing.B)) testing.BenchmarkResult {
	mu.Lock()
	defer mu.Unlock()
	if r, ok := baselines[name]; ok {
		return r
	}
	r := testing.Benchmark(baseline)
	baselines[name] = r
	return r
}
