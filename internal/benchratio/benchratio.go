package benchratio

import (
	"flag"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	mu        sync.Mutex
	baselines = map[string]testing.BenchmarkResult{}
)

// Baselines names, for each benchmark function ("BenchmarkSMASpec"), the
// baselines its ratios are against, by the name Report takes.
type Baselines map[string]map[string]func(*testing.B)

// Selected returns, by name, the baselines of the benchmark functions
// that -test.bench selects (none when no benchmark runs), so a run of one
// benchmark does not first measure the baselines of the others: under
// -benchtime Nx each would run N of its own ops.
func (bs Baselines) Selected() map[string]func(*testing.B) {
	if !flag.Parsed() {
		flag.Parse()
	}
	out := map[string]func(*testing.B){}
	f := flag.Lookup("test.bench")
	if f == nil || f.Value.String() == "" {
		return out
	}
	// As the testing package matches: the pattern's first
	// slash-separated element against the function's name.
	re, err := regexp.Compile(topLevel(f.Value.String()))
	if err != nil {
		return out // the testing package reports the pattern
	}
	for bench, named := range bs {
		if re.MatchString(bench) {
			maps.Copy(out, named)
		}
	}
	return out
}

// topLevel is the part of a -test.bench pattern that matches benchmark
// functions, split as the testing package splits it: each top-level
// alternative ("A/x|B") up to its first slash outside brackets and
// parentheses ("A|B").
func topLevel(pattern string) string {
	var alts []string
	first := -1 // end of the current alternative's first element
	brackets, parens, start := 0, 0, 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '[':
			brackets++
		case ']':
			brackets = max(brackets-1, 0) // an unmatched ']' is legal
		case '(':
			if brackets == 0 {
				parens++
			}
		case ')':
			if brackets == 0 {
				parens--
			}
		case '\\':
			i++
		case '/':
			if brackets == 0 && parens == 0 && first < 0 {
				first = i
			}
		case '|':
			if brackets == 0 && parens == 0 {
				if first < 0 {
					first = i
				}
				alts = append(alts, pattern[start:first])
				start, first = i+1, -1
			}
		}
	}
	if first < 0 {
		first = len(pattern)
	}
	return strings.Join(append(alts, pattern[start:first]), "|")
}

// Measure measures, in name order, the selected baselines (Selected) not
// measured yet in this process.
func (bs Baselines) Measure() {
	sel := bs.Selected()
	for _, n := range slices.Sorted(maps.Keys(sel)) {
		Baseline(n, sel[n])
	}
}

// Main measures the baselines of the selected benchmarks (Measure), then
// runs the tests and exits with their status.
func Main(m *testing.M, bs Baselines) {
	bs.Measure()
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
