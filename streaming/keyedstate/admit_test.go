package keyedstate_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// TestAdmissionKeepsHotKeys: keys seen once used to push every warm key
// out of a full cache (CLOCK alone: the misses sweep the cache, clearing
// reference bits and evicting), so skewed keys missed more than they
// should; now a key used less lately than the coldest cached one is not
// admitted, and its state goes straight behind.
func TestAdmissionKeepsHotKeys(t *testing.T) {
	g := smaGraph(t)
	ref := streaming.NewKeyed[string](g)
	rt := newRuntime(t, g, openDB(t), small(1000)...)
	require.Positive(t, rt.Stats().SketchBytes, "a cache of 1000 keys has an admission sketch")
	var keys []string
	ts := int64(0)
	apply := func(k string) {
		t.Helper()
		ts++
		in, err := rt.Apply(k, ts, "seq", seqCursor(int(ts)), streaming.Float(float64(ts%97)))
		require.NoError(t, err)
		want := ref.Eval(k, ts, streaming.Float(float64(ts%97)))
		require.Equal(t, want.Output(0), in.Output(0), "record %d key %s", ts, k)
	}
	hot := make([]string, 500)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%d", i)
		keys = append(keys, hot[i])
	}
	// Ten rounds: every hot key once, then 2,000 keys seen once. Between
	// two uses of a hot key the CLOCK hand sweeps the cache twice.
	var before, after keyedstate.Stats
	cold := 0
	for round := range 10 {
		if round == 9 {
			before = rt.Stats()
		}
		for _, k := range hot {
			apply(k)
		}
		if round == 9 {
			after = rt.Stats()
		}
		for range 2000 {
			k := fmt.Sprintf("cold-%d", cold)
			cold++
			keys = append(keys, k)
			apply(k)
		}
	}
	missed := after.Misses - before.Misses
	require.LessOrEqual(t, missed, uint64(len(hot)/10), "at most a tenth of the hot keys left the cache (CLOCK alone: all of them)")
	require.Positive(t, after.NotAdmitted, "keys seen once were not admitted")
	require.Positive(t, after.Flushes, "the states of keys not admitted were written behind")
	requireSameState(t, ref, rt, keys)
	require.NoError(t, rt.Flush())
	requireSameState(t, ref, rt, keys)
}
