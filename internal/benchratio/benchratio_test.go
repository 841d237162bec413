package benchratio

import (
	"flag"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTopLevel(t *testing.T) {
	for pattern, want := range map[string]string{
		".":                         ".",
		"SMASpec":                   "SMASpec",
		"PerEvent/uniform":          "PerEvent",
		"PerEvent/uniform|CutCost":  "PerEvent|CutCost",
		"PerEvent|CutCost/10k":      "PerEvent|CutCost",
		"(A|B)/x":                   "(A|B)",
		"[/]x/y":                    "[/]x",
		`A\/B/c`:                    `A\/B`,
		"Round64Shards/store=files": "Round64Shards",
	} {
		if got := topLevel(pattern); got != want {
			t.Errorf("topLevel(%q) = %q, want %q", pattern, got, want)
		}
	}
}

func TestSelectedOnlyTheRunBenchmarksBaselines(t *testing.T) {
	f := flag.Lookup("test.bench")
	old := f.Value.String()
	t.Cleanup(func() { _ = flag.Set("test.bench", old) })
	noop := func(*testing.B) {}
	bs := Baselines{
		"BenchmarkSMASpec":        {"franzmap": noop},
		"BenchmarkSMASpecArchive": {"noarchive": noop},
		"BenchmarkCentralArchive": {},
		"BenchmarkCutCost":        {"cut": noop, "franzmap": noop},
	}
	for pattern, want := range map[string][]string{
		"":                        nil,
		"CentralArchive":          nil,
		"SMASpec$":                {"franzmap"},
		"SMASpec":                 {"franzmap", "noarchive"},
		"CutCost/10k|SMASpecArch": {"cut", "franzmap", "noarchive"},
		".":                       {"cut", "franzmap", "noarchive"},
	} {
		require.NoError(t, flag.Set("test.bench", pattern))
		got := slices.Sorted(maps.Keys(bs.Selected()))
		assert.Equal(t, want, got, "-test.bench %q", pattern)
	}
}
