package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// TestShardsShareTheWholeBudget: a worker splits State.Memory among the
// shards it holds, not among the topic's partitions. Alone on 4
// partitions each shard has a quarter; once a second worker took half of
// them, each of the first worker's two has a half, so the worker still
// uses its whole budget (it used to keep a quarter each and leave half
// its memory unused); when the second worker leaves, the first is back
// to quarters, and its shards' budgets never add up to more than the
// whole.
func TestShardsShareTheWholeBudget(t *testing.T) {
	const parts = 4
	p := rebalancing(t, parts)
	total := int64(p.State.Memory)

	// budgets returns the budgets of w's shards, once they are n.
	budgets := func(w *pipeline.Worker, n int) []int64 {
		t.Helper()
		return holding(t, w, n, func(s pipeline.ShardStatus) int64 { return s.State.BudgetBytes })
	}
	each := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = total / int64(n)
		}
		return out
	}

	a := start(t, p, pipeline.WithWorkerID("a"))
	require.Equal(t, each(4), budgets(a.w, 4))

	b := start(t, p, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return len(a.w.Shards()) == 2 && len(b.w.Shards()) == 2 }, 30*time.Second, 10*time.Millisecond,
		"the two workers never shared the partitions")
	require.Equal(t, each(2), budgets(a.w, 2))
	require.Equal(t, each(2), budgets(b.w, 2))

	b.stop(t)
	require.Equal(t, each(4), budgets(a.w, 4))
}

// TestWorkerReportsItsRestore: a worker that gains a shard whose
// checkpoint is larger than a memtable of its state database restores it,
// runs the compaction step after it (keyedstate's Restore), reports both
// in Shards, and goes on from the restored state exactly. Here the
// compaction finds one level and returns at once: the keys and value
// pointers of 60k states fit level 0 (keyedstate's
// TestLargeRestoreLeavesOneLevel restores enough to compact).
func TestWorkerReportsItsRestore(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	rec := newRecorder()
	p := alarmPipeline(addrs, t.TempDir(), rec.shared())
	p.State.Dir = t.TempDir()
	// 96 MiB: 3 MiB memtables; 60k keys' states are several.
	const sensors = 60_000
	// Two readings a sensor fill no window of 3; the third, for a tenth
	// of them, after the restore, gives means of all three.
	first, second := makeReadings(sensors, 0, 1), makeReadings(sensors, 2, 2)[:sensors/10]
	produce(t, addrs, first)
	a := start(t, p, pipeline.WithWorkerID("a"))
	require.Eventually(t, func() bool { return a.w.Stats().RecordsIn == uint64(len(first)) }, 60*time.Second, 20*time.Millisecond,
		"the first worker never applied the readings")
	require.NoError(t, a.w.Checkpoint(context.Background()))
	a.stop(t)

	p.State.Dir = t.TempDir() // a new worker, with the checkpoint only
	b := start(t, p, pipeline.WithWorkerID("b"))
	var st pipeline.KeyedStats
	require.Eventually(t, func() bool {
		ss := b.w.Shards()
		if len(ss) == 1 {
			st = ss[0].State
		}
		return len(ss) == 1 && ss[0].Restored != 0
	}, 30*time.Second, 10*time.Millisecond, "the second worker never restored the shard")
	require.Equal(t, uint64(sensors), st.RestoredKeys)
	require.Positive(t, st.RestoreCompaction, "a restore of %d keys runs the compaction step", sensors)

	produce(t, addrs, second)
	all := append(append([]reading(nil), first...), second...)
	want := reference(t, p, all)
	means := 0
	for k := range want {
		if k.name == "mean" {
			means++
		}
	}
	require.Equal(t, sensors/10, means, "a mean for each sensor read a third time")
	require.Eventually(t, func() bool { return rec.has(want) }, 60*time.Second, 20*time.Millisecond,
		"the second worker never applied the new readings")
	rec.requireExact(t, want)
}

// TestShardsCountAKeyAtOneMeasuredSize: what one cached key costs is
// measured once, by NewWorker, before the worker runs anything, and every
// shard the worker gains counts keys at that size. Measured at each gain,
// it counted what the process allocated meanwhile (here a goroutine
// allocating, as running shards' hot paths do during a rebalance): a
// shard gained in a rebalance got a cache a fraction of its budget's
// size (keys counted at about 19 KB, not 0.5 KB).
func TestShardsCountAKeyAtOneMeasuredSize(t *testing.T) {
	const parts = 4
	p := rebalancing(t, parts)

	sizes := func(w *pipeline.Worker, n int) []int {
		t.Helper()
		return holding(t, w, n, func(s pipeline.ShardStatus) int { return s.State.EntryBytes })
	}
	a := start(t, p, pipeline.WithWorkerID("a"))
	first := sizes(a.w, parts)
	require.Positive(t, first[0])

	stop := make(chan struct{})
	var garbage sync.WaitGroup
	garbage.Go(func() {
		var keep [][]byte
		for {
			select {
			case <-stop:
				return
			default:
			}
			keep = append(keep, make([]byte, 4096))
			if len(keep) == 256 {
				keep = nil
			}
		}
	})
	defer func() { close(stop); garbage.Wait() }()

	b := start(t, p, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return len(a.w.Shards()) == 2 && len(b.w.Shards()) == 2 }, 30*time.Second, 10*time.Millisecond,
		"the two workers never shared the partitions")
	b.stop(t)
	// a gains two shards again while the process allocates.
	for _, sz := range sizes(a.w, parts) {
		require.Equal(t, first[0], sz, "every shard of the worker counts a key at the size measured once: %v then %v", first, sizes(a.w, parts))
	}
}

// holding waits until w holds n shards and returns what of each of
// them field picks.
func holding[T any](t *testing.T, w *pipeline.Worker, n int, field func(pipeline.ShardStatus) T) []T {
	t.Helper()
	var ss []pipeline.ShardStatus
	require.Eventually(t, func() bool {
		ss = w.Shards()
		return len(ss) == n
	}, 30*time.Second, 10*time.Millisecond, "the worker never held %d shards", n)
	out := make([]T, len(ss))
	for i, s := range ss {
		out[i] = field(s)
	}
	return out
}

// rebalancing is the alarm pipeline on a new cluster of parts
// partitions, with short session and revoke timeouts for tests where
// workers join and leave.
func rebalancing(t *testing.T, parts int32) pipeline.Pipeline {
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	p := alarmPipeline(addrs, "")
	p.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 3 * time.Second, RevokeTimeout: 5 * time.Second}
	p.State.Durable = pipeline.Durable{Store: memory.New()}
	p.Checkpoint = pipeline.Checkpoint{Interval: time.Second}
	return p
}

// TestMinMemoryHoldsAHundredShards: at pipeline.MinMemory (the least
// state.memory a spec may give) a worker owns and runs 100 partitions;
// over 150 the split leaves a shard no room for a key, and the worker
// stops with an error that names state.memory and what to do.
func TestMinMemoryHoldsAHundredShards(t *testing.T) {
	for _, tc := range []struct {
		parts int32
		fails bool
	}{{100, false}, {150, true}} {
		c := newCluster(t, tc.parts)
		p := alarmPipeline(c.ListenAddrs(), t.TempDir(), newRecorder().shared())
		p.State.Memory = pipeline.MinMemory
		require.NoError(t, p.Validate())
		if !tc.fails {
			w := start(t, p, pipeline.WithWorkerID("a"))
			w.waitFor(t, func() bool { return w.w.Stats().Owned == int(tc.parts) }, 30*time.Second, "the worker never owned every partition")
			w.stop(t)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w, err := pipeline.NewWorker(ctx, p, pipeline.WithLogger(testLogger(t)))
		require.NoError(t, err)
		err = w.Run(ctx)
		require.ErrorIs(t, err, keyedstate.ErrBudgetTooSmall)
		require.ErrorContains(t, err, "state.memory 80MiB split ")
		require.ErrorContains(t, err, "raise state.memory, or run more workers to share the shards")
	}
}
