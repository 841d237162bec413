package keyedstate_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

func TestZZOrder(t *testing.T) {
	order := strings.Split(os.Getenv("ZZ_ORDER"), ",")
	if order[0] == "" {
		t.Skip()
	}
	g := smaGraph(t)
	seqs := keySeqs()
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil).
		WithBlockCacheSize(32 << 20).WithMemTableSize(16 << 20))
	require.NoError(t, err)
	defer db.Close()
	rt, err := keyedstate.New[uint64](g, keyedstate.Uint64Keys{}, db, keyedstate.WithMemoryBudget(64<<20))
	require.NoError(t, err)
	for i := range workingSet {
		_, err := rt.Apply(uint64(i), 0, "seq", nil, streaming.Float(float64(i)))
		require.NoError(t, err)
	}
	require.NoError(t, rt.Flush())
	for _, d := range order {
		seq := seqs[d]
		before := rt.Stats()
		t0 := time.Now()
		c0 := cpu()
		n := 300_000
		for i := range n {
			_, err := rt.Apply(seq[i&(seqLen-1)], int64(i), "seq", nil, streaming.Float(float64(i)))
			require.NoError(t, err)
		}
		el := time.Since(t0)
		c1 := cpu() - c0
		after := rt.Stats()
		t.Logf("%s: cpu %v/event, %v/event hit %.3f evictions %d flushes %d waits %d L0 %v", d, c1/time.Duration(n), el/time.Duration(n),
			float64(after.Hits-before.Hits)/float64(n), after.Evictions-before.Evictions, after.Flushes-before.Flushes, after.FlushWaits-before.FlushWaits, db.Levels()[0].NumTables)
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
