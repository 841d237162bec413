// Package benchratio reports a benchmark's cost as a ratio against a
// baseline measured in the same run, so speed targets ("within 3× of a
// hand-written loop") are judged on one machine at one moment instead of
// against absolute numbers from somewhere else.
//
// Baselines are measured once per process, before any benchmark runs, by
// Main (called from the package's TestMain): testing.Benchmark cannot run
// inside a running benchmark (the testing package holds its benchmark lock
// for the whole benchmark function), so Report only reads them.
//
//	func TestMain(m *testing.M) {
//		benchratio.Main(m, map[string]func(*testing.B){"handloop": baselineEdge})
//	}
//	func BenchmarkEdge(b *testing.B) {
//		for i := 0; i < b.N; i++ { ... }
//		benchratio.Report(b, "handloop", baselineEdge)
//	}
//
// Concurrency: Main runs before the tests; Report may be called from any
// benchmark.
package benchratio

import (
	"flag"
	"os"
	"sort"
	"sync"
	"testing"
)

var (
	mu        sync.Mutex
	baselines = map[string]testing.BenchmarkResult{}
)

// Main measures the named baselines when benchmarks were asked for
// (-test.bench set), then runs the tests and exits with their status.
func Main(m *testing.M, named map[string]func(*testing.B)) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		names := make([]string, 0, len(named))
		for n := range named {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			Baseline(n, named[n])
		}
	}
	os.Exit(m.Run())
}

// Report adds the metric "x-<name>" to b: b's ns/op divided by the
// baseline's. Call it after b's timed loop. The baseline must have been
// measured by Main (or Baseline) before the benchmark started; otherwise
// Report fails the benchmark with a message saying so.
func Report(b *testing.B, name string, baseline func(*testing.B)) {
	b.Helper()
	if b.N == 0 {
		return
	}
	mu.Lock()
	base, ok := baselines[name]
	mu.Unlock()
	if !ok {
		b.Fatalf("benchratio: baseline %q was not measured before the benchmark; register it with benchratio.Main in TestMain", name)
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	if base.N == 0 || base.T <= 0 {
		return
	}
	basePer := float64(base.T.Nanoseconds()) / float64(base.N)
	if basePer <= 0 {
		return
	}
	b.ReportMetric(per/basePer, "x-"+name)
	b.ReportMetric(basePer, name+"-ns/op")
}

// Baseline runs (once per process) and returns the baseline registered
// under name. It must not be called from inside a running benchmark.
func Baseline(name string, baseline func(*testing.B)) testing.BenchmarkResult {
	mu.Lock()
	if r, ok := baselines[name]; ok {
		mu.Unlock()
		return r
	}
	mu.Unlock()
	r := testing.Benchmark(baseline)
	mu.Lock()
	baselines[name] = r
	mu.Unlock()
	return r
}
