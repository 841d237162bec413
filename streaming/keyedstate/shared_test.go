package keyedstate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// TestRestoreLeavesOtherRuntimesOfTheDBAlone: runtimes of several shards
// share one DB under their own prefixes, and one restores while another
// evicts keys through its write-behind flusher. The bug: Restore cleared
// its prefix with Badger's DropPrefix, which blocks every write to the
// DB while it runs, so the other runtime's flushes failed (a sticky
// error: that shard stopped) and two restores at once failed each other.
func TestRestoreLeavesOtherRuntimesOfTheDBAlone(t *testing.T) {
	db := openDB(t)
	g := smaGraph(t)
	newRT := func(prefix string) *keyedstate.Runtime[string] {
		rt, err := keyedstate.New(g, keyedstate.StringKeys{}, db, keyedstate.WithMemoryBudget(testDBBytes+(3<<20)),
			keyedstate.WithWriteBatchBytes(16<<10), keyedstate.WithEntryBytes(8<<10), keyedstate.WithGCHeadroom(0), keyedstate.WithPrefix([]byte(prefix)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = rt.Close() })
		return rt
	}
	busy := newRT("busy/")
	restorers := []*keyedstate.Runtime[string]{newRT("r1/"), newRT("r2/")}
	for i, rt := range restorers {
		for k := range 2000 {
			_, err := rt.Apply(fmt.Sprintf("k%04d", k), int64(k), "seq", seqCursor(k), streaming.Float(float64(i)))
			require.NoError(t, err)
		}
		require.NoError(t, rt.Flush())
	}

	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var busyErr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Many keys: the cache evicts and the write-behind flushes.
			if _, err := busy.Apply(fmt.Sprintf("b%05d", i%20000), int64(i), "seq", seqCursor(i), streaming.Float(1)); err != nil {
				busyErr = err
				return
			}
		}
	})
	empty := func(func([]byte, error) bool) {}
	for range 20 {
		var rwg sync.WaitGroup
		errs := make([]error, len(restorers))
		for i, rt := range restorers {
			rwg.Go(func() { errs[i] = rt.Restore(ctx, "seq", seqCursor(0), empty) })
		}
		rwg.Wait()
		for _, err := range errs {
			require.NoError(t, err, "two restores at once")
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, busyErr, "the busy runtime failed while others restored")
	require.NoError(t, busy.Flush())
	require.Positive(t, busy.Stats().Flushes, "the busy runtime never flushed: the test did not exercise the race")
	for _, rt := range restorers {
		_, found, err := rt.Get("k0001")
		require.NoError(t, err)
		require.False(t, found, "Restore left the prefix's old keys")
	}
}
