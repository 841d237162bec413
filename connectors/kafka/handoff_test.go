package kafka

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
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
	old.stop(t)
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
