package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRevokeTimeoutReleasesWithoutCommit: the old owner's final checkpoint
// hangs on its state store; after the revoke timeout the partitions are
// released without a commit, and the new owner replays from the last
// durable checkpoint. State stays exact.
func TestRevokeTimeoutReleasesWithoutCommit(t *testing.T) {
	const parts, per = 4, 40
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(12)
	g := seqGraph(t)
	durable := memory.New()
	hanging := faults.Wrap(durable, nil) // the old owner's view of the same store
	j := &journal{}

	produceReadings(t, addrs, keys, 1, per)
	old := startMember(t, "old", memberOpts(addrs, g, hanging, j, "old", WithRevokeTimeout(300*time.Millisecond))...)
	require.Eventually(t, func() bool { return j.allReached(keys, per) }, 20*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, old.src.Checkpoint(ctx))

	produceReadings(t, addrs, keys, per+1, 2*per)
	require.Eventually(t, func() bool { return j.allReached(keys, 2*per) }, 20*time.Second, 5*time.Millisecond)
	hanging.Hang(faults.OpSave, faults.OpSaveBatch)

	newer := startMember(t, "new", memberOpts(addrs, g, durable, j, "new")...)
	require.Eventually(t, func() bool { return newer.src.Stats().Owned > 0 }, 20*time.Second, 5*time.Millisecond)
	require.Positive(t, old.src.Stats().RevokeFailures, "the hung final checkpoint did not time out")
	require.Positive(t, newer.src.Stats().RestoredDurable)

	produceReadings(t, addrs, keys, 2*per+1, 3*per)
	require.Eventually(t, func() bool { return j.allReached(keys, 3*per) }, 20*time.Second, 5*time.Millisecond)
	hanging.Heal()
	old.stop(t)
	newer.stop(t)
	j.requireOneOwnerPerEpoch(t)

	state := durableState(t, durable, g, "central", parts)
	require.Len(t, state, len(keys))
	for _, k := range keys {
		require.Equal(t, int64(3*per), state[k].count, "key %s", k)
		require.Zero(t, state[k].violations, "key %s", k)
	}
	j.mu.Lock()
	require.Greater(t, len(j.events), 3*per*len(keys), "the moved partitions were not replayed")
	j.mu.Unlock()
}

// TestDroppedWhenNotOwned: records that reach a partition goroutine after
// the partition stopped being owned are dropped before they touch state,
// and counted.
func TestDroppedWhenNotOwned(t *testing.T) {
	g := seqGraph(t)
	var applied atomic.Int64
	src := &Source{cfg: defaultSourceConfig(), router: NewKafkaShardRouter()}
	src.cfg.graph = g
	src.cfg.onApply = func(*Applied) { applied.Add(1) }
	p := Partition{"readings", 0}
	epoch := src.router.Assign(1, p)
	w := newPartition(src, p, epoch)
	go w.run()
	defer w.halt()

	batch := func(from int) []*kgo.Record {
		var recs []*kgo.Record
		for i := from; i < from+5; i++ {
			recs = append(recs, &kgo.Record{Topic: "readings", Offset: int64(i), Value: reading("s-1", i+1)})
		}
		return recs
	}
	w.in <- batch(0)
	require.Eventually(t, func() bool { return applied.Load() == 5 }, 5*time.Second, time.Millisecond)

	src.router.Revoke(2, p)
	w.in <- batch(5)
	require.Eventually(t, func() bool { return src.router.Dropped() == 5 }, 5*time.Second, time.Millisecond)
	// Re-gained at a later epoch: the old goroutine's epoch is stale, so
	// it still must not apply.
	src.router.Assign(3, p)
	w.in <- batch(10)
	require.Eventually(t, func() bool { return src.router.Dropped() == 10 }, 5*time.Second, time.Millisecond)
	require.Equal(t, int64(5), applied.Load())
	w.halt()
	st := w.keys["s-1"].in.Operator("check").(*seqCheck)
	require.Equal(t, int64(5), st.count)
}

// flushOrder records the order of sink flushes and cursor saves.
type flushOrder struct {
	mu     sync.Mutex
	events []string
	inner  streaming.CursorStore
}

func (f *flushOrder) Flush(context.Context) error {
	f.mu.Lock()
	f.events = append(f.events, "flush")
	f.mu.Unlock()
	return nil
}

func (f *flushOrder) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	f.mu.Lock()
	f.events = append(f.events, "cursor")
	f.mu.Unlock()
	return f.inner.SaveCursor(ctx, key, rec)
}

func (f *flushOrder) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	return f.inner.LoadCursor(ctx, key)
}

// TestSinksFlushedBeforeCursor: a checkpoint flushes the sinks (and the
// published outputs reach Kafka) before it saves the cursor.
func TestSinksFlushedBeforeCursor(t *testing.T) {
	c := newCluster(t, 1, kfakeTopic("signals"))
	addrs := c.ListenAddrs()
	keys := sensorKeys(3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := NewPublisher(ctx, PublishTo("signals", addrs...), PublisherClientOptions(kgo.ProducerLinger(time.Minute)))
	require.NoError(t, err)
	defer pub.Close()
	order := &flushOrder{inner: memory.New()}
	j := &journal{}
	hook := j.hook("m")
	produceReadings(t, addrs, keys, 1, 10)
	m := startMember(t, "m", memberOpts(addrs, seqGraph(t), memory.New(), j, "m",
		WithCursorStore(order), WithSinks(order, pub),
		WithOnApply(func(a *Applied) {
			hook(a)
			sig := streaming.Signal[int, float64]{Key: a.Key, TS: a.TS, Payload: float64(a.Offset)}
			if err := PublishSignal(ctx, pub, sig, &EnvelopeSource{a.Partition.Topic, a.Partition.Partition, a.Offset}, a.Epoch); err != nil {
				t.Errorf("publish: %v", err)
			}
		}))...)
	require.Eventually(t, func() bool { return j.allReached(keys, 10) }, 20*time.Second, 5*time.Millisecond)
	require.Zero(t, pub.Produced(), "a one-minute linger should hold the outputs until a flush")
	require.NoError(t, m.src.Checkpoint(ctx))
	require.Equal(t, uint64(30), pub.Produced(), "outputs not flushed by the checkpoint")
	order.mu.Lock()
	require.Equal(t, []string{"flush", "cursor"}, order.events)
	order.mu.Unlock()
	m.stop(t)
}
