package kafka

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/streaming"
)

// hangingRelease is a ledger member whose final Release waits for its
// context to end: a final checkpoint stuck on its store.
type hangingRelease struct{ ledgerMember }

func (h hangingRelease) Open(ctx context.Context, a Assignment) (PartitionHandler, int64, error) {
	ph, last, err := h.ledgerMember.Open(ctx, a)
	if err != nil {
		return nil, 0, err
	}
	return hangingPart{ph.(*ledgerPart)}, last, nil
}

type hangingPart struct{ *ledgerPart }

func (h hangingPart) Release(ctx context.Context, final bool) error {
	if final {
		<-ctx.Done()
		h.l.mu.Lock()
		h.closed = true
		h.l.mu.Unlock()
		return ctx.Err()
	}
	return h.ledgerPart.Release(ctx, final)
}

// TestRevokeTimeoutReleasesWithoutCommit: the old owner's final Release
// hangs; after the revoke timeout its context ends, the partitions are
// released without a checkpoint (counted) and the new owner resumes from
// the last one: the records after it are handed again, in order.
func TestRevokeTimeoutReleasesWithoutCommit(t *testing.T) {
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(12)
	l := newLedger()
	opts := func(ps Partitions, extra ...SourceOption) []SourceOption {
		return append([]SourceOption{WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"), WithPartitions(ps),
			WithClientOptions(kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond))}, extra...)
	}
	produceReadings(t, addrs, keys, 1, 40)
	old := startMember(t, "old", opts(hangingRelease{ledgerMember{l, "old"}}, WithRevokeTimeout(300*time.Millisecond))...)
	require.Eventually(t, func() bool { return l.count() == 12*40 }, 20*time.Second, 5*time.Millisecond)

	newer := startMember(t, "new", opts(l.as("new"))...)
	require.Eventually(t, func() bool { return newer.src.Stats().Owned > 0 }, 20*time.Second, 5*time.Millisecond)
	require.Positive(t, old.src.Stats().RevokeFailures, "the hung final release did not time out")
	produceReadings(t, addrs, keys, 41, 60)
	require.Eventually(t, func() bool { return newer.src.Stats().Applied > 0 && l.count() >= 12*60 }, 20*time.Second, 5*time.Millisecond)
	newer.stop(t)
	// The old member's final releases hang at its own stop too (it still
	// owns what it kept at the rebalance): Run reports them.
	require.NoError(t, old.src.Close())
	select {
	case err := <-old.done:
		var pe *PartitionError
		require.ErrorAs(t, err, &pe, "a stop whose final releases timed out returned %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "final release of partition readings/")
	case <-time.After(30 * time.Second):
		t.Fatal("the old member did not stop")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	replayed := 0
	for p, offs := range l.handled {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				replayed++
			}
			require.LessOrEqual(t, offs[i], offs[i-1]+1, "partition %s: a gap in the offsets handed over", p)
		}
	}
	require.Positive(t, replayed, "the moved partitions were not replayed from their last checkpoint")
}

// TestDroppedWhenNotOwned: records that reach a partition goroutine after
// the partition stopped being owned are dropped before they reach the
// handler, and counted.
func TestDroppedWhenNotOwned(t *testing.T) {
	l := newLedger()
	src := &Source{cfg: defaultSourceConfig(), router: NewShardRouter()}
	p := Partition{"readings", 0}
	epoch := src.router.Assign(1, p)
	h, last, err := l.as("m").Open(context.Background(), Assignment{Partition: p, Epoch: epoch})
	require.NoError(t, err)
	w := newPartition(src, p, epoch, h, last)
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
	require.Eventually(t, func() bool { return l.count() == 5 }, 5*time.Second, time.Millisecond)

	src.router.Revoke(2, p)
	w.in <- batch(5)
	require.Eventually(t, func() bool { return src.router.Dropped() == 5 }, 5*time.Second, time.Millisecond)
	// Re-gained at a later epoch: the old goroutine's epoch is stale, so
	// it still must not hand records over.
	src.router.Assign(3, p)
	w.in <- batch(10)
	require.Eventually(t, func() bool { return src.router.Dropped() == 10 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 5, l.count())
}

// TestRunStoppedBeforeConnectingIsClean: a Source whose context ends
// while it is still connecting owned nothing; Run returns nil (a requested
// stop), while an unreachable cluster under a live context is an error.
func TestRunStoppedBeforeConnectingIsClean(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	newSrc := func() *Source {
		s, err := NewSource(WithBrokers(addr), WithGroup("g"), WithTopics("readings"), WithPartitions(newLedger().as("m")),
			WithClientOptions(kgo.RetryTimeout(500*time.Millisecond), kgo.DialTimeout(200*time.Millisecond)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, newSrc().Run(ctx), "stopped before connecting")

	live, liveCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer liveCancel()
	err = newSrc().Run(live)
	require.Error(t, err, "an unreachable cluster is an error")
	require.ErrorContains(t, err, `kafka source (group "g"): connect`)
}

// gatedPart is a ledger partition whose first Handle waits for gate: a
// handler stuck on a full sink.
type gatedPart struct {
	*ledgerPart
	entered, gate chan struct{}
	once          sync.Once
}

func (g *gatedPart) Handle(ctx context.Context, recs []*kgo.Record) error {
	g.once.Do(func() {
		close(g.entered)
		<-g.gate
	})
	return g.ledgerPart.Handle(ctx, recs)
}

// TestPolledRecordsDoNotReachALaterOwnership: the poll loop waits to hand
// one partition its records (its queue is full) while it holds another's,
// polled for an ownership that is then revoked and gained again. Those
// records are dropped, not handed to the new ownership's goroutine, which
// resumes after its restored checkpoint and gets them again from the next
// fetch. Bug: they were looked up and handed over only once the wait was
// over, so the new ownership applied them twice.
func TestPolledRecordsDoNotReachALaterOwnership(t *testing.T) {
	ctx := context.Background()
	l := newLedger()
	cfg := defaultSourceConfig()
	cfg.queueDepth = 1
	src := &Source{cfg: cfg, router: NewShardRouter(), parts: map[Partition]*partition{}}
	p0, p1 := Partition{"readings", 0}, Partition{"readings", 1}
	recs := func(p Partition, from, to int) []*kgo.Record {
		var out []*kgo.Record
		for i := from; i <= to; i++ {
			out = append(out, &kgo.Record{Topic: p.Topic, Partition: p.Partition, Offset: int64(i), Value: reading("s-1", i+1)})
		}
		return out
	}
	start := func(p Partition, epoch streaming.Epoch, gate chan struct{}) (*partition, *gatedPart) {
		h, last, err := l.as("m").Open(ctx, Assignment{Partition: p, Epoch: epoch})
		require.NoError(t, err)
		g := &gatedPart{ledgerPart: h.(*ledgerPart), entered: make(chan struct{}), gate: gate}
		if gate == nil {
			g.once.Do(func() {})
		}
		w := newPartition(src, p, epoch, g, last)
		src.mu.Lock()
		src.parts[p] = w
		src.mu.Unlock()
		go w.run()
		t.Cleanup(w.halt)
		return w, g
	}
	handled := func(p Partition) int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.handled[p])
	}

	epoch := src.router.Assign(1, p0, p1)
	gate := make(chan struct{})
	w0, _ := start(p0, epoch, nil)
	w1, g1 := start(p1, epoch, gate)
	w0.in <- recs(p0, 0, 4)
	require.Eventually(t, func() bool { return handled(p0) == 5 }, 5*time.Second, time.Millisecond)
	w1.in <- recs(p1, 0, 1)
	<-g1.entered            // p1's handler is stuck
	w1.in <- recs(p1, 2, 3) // and its queue full

	// One poll: p1's next records, then p0's.
	polled := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "readings", Partitions: []kgo.FetchPartition{
		{Partition: 1, HighWatermark: 6, Records: recs(p1, 4, 5)},
		{Partition: 0, HighWatermark: 10, Records: recs(p0, 5, 9)},
	}}}}}
	handing := make(chan struct{})
	go func() {
		defer close(handing)
		src.hand(ctx, nil, polled, src.router.AssignmentEpoch())
	}()
	require.Eventually(t, func() bool { return w1.hwm.Load() == 6 }, 5*time.Second, time.Millisecond, "the poll loop waits on p1")

	// Meanwhile p0 is revoked (its final checkpoint at offset 4) and
	// gained again, resuming after offset 4.
	src.release(ctx, nil, []Partition{p0}, true)
	w0b, _ := start(p0, src.router.Assign(3, p0), nil)
	require.Equal(t, int64(4), w0b.lastOffset)

	close(gate)
	<-handing
	require.Eventually(t, func() bool { return src.router.Dropped() >= 5 || handled(p0) > 5 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 5, handled(p0), "records polled for the revoked ownership reached the new one")
	require.Equal(t, uint64(5), src.router.Dropped())

	w0b.in <- recs(p0, 5, 9) // the new ownership's first fetch
	require.Eventually(t, func() bool { return handled(p0) == 10 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return handled(p1) == 6 }, 5*time.Second, time.Millisecond)
}
