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

// Record stores a baseline measured elsewhere under name, as Baseline
// would have: in another process, for a baseline whose memory would
// otherwise weigh on the benchmarks of this one (the Go runtime keeps
// the metadata of a heap it once had, counted against GOMEMLIMIT).
func Record(name string, r testing.BenchmarkResult) {
	mu.Lock()
	baselines[name] = r
	mu.Unlock()
}
