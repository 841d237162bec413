package kafka

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// gated is a Partitions runtime whose handlers hold every batch until the
// gate opens.
type gated struct {
	gate    chan struct{}
	handled atomic.Int64
}

func (g *gated) Open(context.Context, Assignment) (PartitionHandler, int64, error) { return g, -1, nil }

func (g *gated) Handle(ctx context.Context, recs []*kgo.Record) error {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.handled.Add(int64(len(recs)))
	return nil
}

func (g *gated) Release(context.Context, bool) error { return nil }

// TestLagFollowsTheBacklog: Source.Lag is the records of an owned
// partition not yet handled — the whole backlog while the handler is
// held, nothing once it caught up.
func TestLagFollowsTheBacklog(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	g := &gated{gate: make(chan struct{})}
	m := startMember(t, "a", WithBrokers(addrs...), WithGroup("lag"), WithTopics("readings"), WithPartitions(g),
		WithClientOptions(kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)))
	p := Partition{Topic: "readings", Partition: 0}
	require.Eventually(t, func() bool { return m.src.Stats().Owned == 1 }, 20*time.Second, 5*time.Millisecond)
	require.NotContains(t, m.src.Lag(), p, "no fetch answered yet: no lag to report")

	produceReadings(t, addrs, []string{"s1"}, 1, 30)
	require.Eventually(t, func() bool { return m.src.Lag()[p] == 30 }, 20*time.Second, 5*time.Millisecond,
		"the handler holds the first batch: all 30 records are behind (lag %v)", m.src.Lag())
	close(g.gate)
	require.Eventually(t, func() bool { return g.handled.Load() == 30 && m.src.Lag()[p] == 0 }, 20*time.Second, 5*time.Millisecond,
		"caught up: lag %v", m.src.Lag())
	m.stop(t)
}
