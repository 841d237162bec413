package ops

import (
	"flag"
	"os"
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

// TestMain measures the benchmark baselines before any benchmark runs,
// when benchmarks were asked for. benchratio.Report measures an uncached
// baseline with testing.Benchmark, which deadlocks when called from inside
// a running benchmark (the testing package holds its benchmark lock for
// the whole benchmark function); with the baselines cached here, Report
// only reads them. Same process, same run, moments before.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		benchratio.Baseline("handloop", baselineEdge)
		benchratio.Baseline("handloop100k", baselineKeyed)
	}
	os.Exit(m.Run())
}
