//go:build linux

package keyedstate_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// TestRuntimeAdvisesRandomReads: while a runtime is open on an on-disk
// DB, every mapping of the DB's table and value-log files carries the
// kernel's random-read flag ("rr" in /proc/self/smaps), tables written
// after the runtime opened too.
func TestRuntimeAdvisesRandomReads(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir()) // as the kernel names the files
	require.NoError(t, err)
	const budget = 96 << 20
	db, err := badger.Open(keyedstate.BadgerOptions(dir, budget).WithLogger(nil))
	require.NoError(t, err)
	defer db.Close()
	rt, err := keyedstate.New[uint64](smaGraph(t), keyedstate.Uint64Keys{}, db, keyedstate.WithMemoryBudget(budget))
	require.NoError(t, err)
	// Several memtables' worth: the restore writes level-0 tables and
	// flattens them into new ones.
	const keys = 200_000
	require.NoError(t, rt.Restore(context.Background(), "seq", nil, keyedstate.PiecesSeq(1<<20, keys, scaleKey, startState(t))))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mappings, err := dbMappings(dir)
		require.NoError(c, err)
		tables := 0
		for path, random := range mappings {
			assert.True(c, random, "%s is mapped without the random-read advice", path)
			if strings.HasSuffix(path, ".sst") {
				tables++
			}
		}
		assert.NotZero(c, tables, "no table of %s is mapped (mappings: %v)", dir, mappings)
	}, 15*time.Second, 50*time.Millisecond)
	require.NoError(t, rt.Close())
}

// dbMappings returns the mappings of .sst and .vlog files in dir, each
// with whether the kernel has it advised for random reads.
func dbMappings(dir string) (map[string]bool, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	var current string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if current != "" {
				random := strings.Contains(" "+flags+" ", " rr ")
				if prev, seen := out[current]; seen {
					random = random && prev // mapped more than once: every mapping advised
				}
				out[current] = random
			}
			current = ""
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 6 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			path := strings.Join(fields[5:], " ")
			if filepath.Dir(path) == dir && (strings.HasSuffix(path, ".sst") || strings.HasSuffix(path, ".vlog")) {
				current = path
			}
		}
	}
	return out, sc.Err()
}
