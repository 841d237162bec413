package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestorePicksLaterCursor: a member with a local copy restores from it
// only when the local cursor is at least the durable one; when another
// member has moved the partition further, the durable checkpoint wins.
// Each phase continues the stream, and the final durable state is exact.
func TestRestorePicksLaterCursor(t *testing.T) {
	const parts, per = 3, 30
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(9)
	g := seqGraph(t)
	durable := memory.New()
	localA, localB := memory.New(), memory.New()
	j := &journal{}

	phase := func(name string, local *memory.Store, n int) Stats {
		t.Helper()
		produceReadings(t, addrs, keys, (n-1)*per+1, n*per)
		m := startMember(t, name, memberOpts(addrs, g, durable, j, name, WithLocalStateStore(local))...)
		require.Eventually(t, func() bool { return j.allReached(keys, n*per) }, 20*time.Second, 5*time.Millisecond)
		m.stop(t)
		return m.src.Stats()
	}
	st := phase("a1", localA, 1)
	require.Equal(t, uint64(parts), st.RestoredEmpty)

	st = phase("b1", localB, 2) // localB empty: durable
	require.Equal(t, uint64(parts), st.RestoredDurable)

	st = phase("a2", localA, 3) // localA is behind b1's durable checkpoint
	require.Equal(t, uint64(parts), st.RestoredDurable)
	require.Zero(t, st.RestoredLocal)

	st = phase("a3", localA, 4) // a2 refreshed localA: tie goes local
	require.Equal(t, uint64(parts), st.RestoredLocal)
	require.Zero(t, st.RestoredDurable)

	total := 4 * per
	j.mu.Lock()
	require.Len(t, j.events, total*len(keys), "a record was applied twice or lost across restores")
	j.mu.Unlock()
	state := durableState(t, durable, g, "central", parts)
	for _, k := range keys {
		require.Equal(t, int64(total), state[k].count, "key %s", k)
		require.Zero(t, state[k].violations, "key %s", k)
	}
	// The local copy holds the same state (its incremental runs are complete).
	local := durableState(t, localA, g, "central", parts)
	require.Equal(t, state, local)
}

// TestRestoreSeeksWithoutGroupCommit: the checkpoint, not the group's
// committed offset, decides where consumption resumes — with a cursor
// store that is not the group (so nothing is ever committed to Kafka) the
// next member still starts right after the checkpoint's cursor.
func TestRestoreSeeksWithoutGroupCommit(t *testing.T) {
	const parts, per = 2, 20
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(4)
	g := seqGraph(t)
	durable, cursors := memory.New(), memory.New()
	j := &journal{}
	for n := 1; n <= 2; n++ {
		produceReadings(t, addrs, keys, (n-1)*per+1, n*per)
		m := startMember(t, "m", memberOpts(addrs, g, durable, j, "m", WithCursorStore(cursors))...)
		require.Eventually(t, func() bool { return j.allReached(keys, n*per) }, 20*time.Second, 5*time.Millisecond)
		m.stop(t)
	}
	j.mu.Lock()
	require.Len(t, j.events, 2*per*len(keys), "the second member re-applied records the checkpoint held")
	j.mu.Unlock()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	_, err = NewGroupCursorStore(cl, "central").LoadCursor(context.Background(), []byte(ShardName("central", Partition{"readings", 0})))
	require.ErrorIs(t, err, streaming.ErrNotFound, "nothing should have been committed to the group")
}
