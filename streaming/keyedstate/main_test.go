package keyedstate_test

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/benchratio"
)

// benchBaselines are the baselines of each benchmark, by name.
var benchBaselines = benchratio.Baselines{
	"BenchmarkCheckpoint100kDirty": {"badger-writebatch-100k": writeBatchBaseline(nil)},
	"BenchmarkRestore100k":         {"badger-writebatch-100k": writeBatchBaseline(nil)},
	"BenchmarkCutStall":            {"apply-one-record": baselineApply},
	"BenchmarkHotPathDuringSave":   {"apply-no-save": baselineApplyNoSave},
	"BenchmarkPerEvent": {
		"keyed-in-memory-uniform": baselineKeyed("uniform"),
		"keyed-in-memory-zipf1.1": baselineKeyed("zipf1.1"),
	},
	"BenchmarkCutCost": {"cut-10k-of-100k": baselineCut},
}

// inChild are the baselines measured in a child process: the in-memory
// map of every key (about 6 GiB at 10M keys) would leave the Go
// runtime's metadata of that heap (span structures and the like, some
// 150 MiB at 10M keys, never returned) in this process, counted against
// the memory limit the runtime's benchmarks run under and in their
// resident memory.
var inChild = map[string]bool{"keyed-in-memory-uniform": true, "keyed-in-memory-zipf1.1": true}

// childEnv names, in a child process, the baselines it measures.
const childEnv = "TFLO_KEYEDSTATE_BASELINES"

// TestMain measures, before any benchmark runs, the baselines of the
// benchmarks selected by -test.bench (the in-memory map of every key is
// costly to build, and is measured in a child process), then frees them.
func TestMain(m *testing.M) {
	flag.Parse()
	if names := os.Getenv(childEnv); names != "" {
		measureChild(strings.Split(names, ","))
		return
	}
	baselines := benchBaselines.Selected()
	// Measure them now, the big ones in a child process, so that what
	// they built can be dropped before the benchmarks run.
	var here, child []string
	for n := range baselines {
		if inChild[n] {
			child = append(child, n)
			delete(baselines, n)
		} else {
			here = append(here, n)
		}
	}
	sort.Strings(here)
	sort.Strings(child)
	if len(child) > 0 {
		if err := baselinesInChild(child); err != nil {
			fmt.Fprintln(os.Stderr, "keyedstate benchmarks:", err)
			os.Exit(1)
		}
	}
	for _, n := range here {
		benchratio.Baseline(n, baselines[n])
	}
	dropBaselines()
	os.Exit(m.Run())
}

// baselinesInChild runs this test binary again to measure the named
// baselines, and records what it prints: one line per baseline,
// "baseline NAME N NANOSECONDS CPU-NS-PER-OP".
func baselinesInChild(names []string) error {
	args := []string{"-test.run=^$"}
	if f := flag.Lookup("test.benchtime"); f != nil {
		args = append(args, "-test.benchtime="+f.Value.String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(names, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("baselines %v in a child process: %w", names, err)
	}
	got := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var name string
		var n int
		var ns int64
		var cpu float64
		if _, err := fmt.Sscanf(sc.Text(), "baseline %s %d %d %g", &name, &n, &ns, &cpu); err != nil {
			continue
		}
		benchratio.Record(name, testing.BenchmarkResult{N: n, T: time.Duration(ns)})
		baselineCPU[name] = cpu
		got[name] = true
	}
	for _, n := range names {
		if !got[n] {
			return fmt.Errorf("the child process measured no baseline %q; it printed:\n%s", n, out)
		}
	}
	return nil
}

// measureChild is the child process: it measures the named baselines
// and prints them for baselinesInChild.
func measureChild(names []string) {
	all := map[string]func(*testing.B){}
	for _, named := range benchBaselines {
		for n, f := range named {
			all[n] = f
		}
	}
	for _, n := range names {
		f, ok := all[n]
		if !ok {
			fmt.Fprintf(os.Stderr, "no baseline %q\n", n)
			os.Exit(2)
		}
		r := testing.Benchmark(f)
		fmt.Printf("baseline %s %d %d %g\n", n, r.N, r.T.Nanoseconds(), baselineCPU[n])
	}
	os.Exit(0)
}
