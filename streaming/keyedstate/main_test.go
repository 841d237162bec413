package keyedstate_test

import (
	"flag"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

// TestMain measures, before any benchmark runs, the baselines of the
// benchmarks selected by -test.bench (the in-memory map of every key is
// costly to build), then frees them.
func TestMain(m *testing.M) {
	flag.Parse()
	baselines := map[string]func(*testing.B){}
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		// Only the top-level part of the pattern names a benchmark
		// function ("PerEvent1M/zipf" selects BenchmarkPerEvent1M).
		re, err := regexp.Compile(strings.SplitN(f.Value.String(), "/", 2)[0])
		if err == nil {
			for bench, named := range map[string]map[string]func(*testing.B){
				"BenchmarkCheckpoint100kDirty": {"badger-writebatch-100k": writeBatchBaseline(nil)},
				"BenchmarkRestore100k":         {"badger-writebatch-100k": writeBatchBaseline(nil)},
				"BenchmarkCutStall":            {"apply-one-record": baselineApply},
				"BenchmarkHotPathDuringSave":   {"apply-no-save": baselineApplyNoSave},
				"BenchmarkPerEvent": {
					"keyed-in-memory-uniform": baselineKeyed("uniform"),
					"keyed-in-memory-zipf1.1": baselineKeyed("zipf1.1"),
				},
				"BenchmarkCutCost": {"cut-10k-of-100k": baselineCut},
			} {
				if re.MatchString(bench) {
					for n, f := range named {
						baselines[n] = f
					}
				}
			}
		}
	}
	// Measure now (Main would return these cached results) so the 1M-key
	// Keyed can be dropped before the benchmarks run.
	names := make([]string, 0, len(baselines))
	for n := range baselines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		benchratio.Baseline(n, baselines[n])
	}
	dropBaselines()
	benchratio.Main(m, baselines)
}
