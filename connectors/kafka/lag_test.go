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

// TestBatchOverTheDecompressLimitFailsTheSource: a compressed batch that
// decompresses past kgo's MaxDecompressBatchBytes stops its partition for
// good (kgo fetches it no more). The source only logged a warning, and
// the partition stalled silently behind it while the worker looked
// healthy. The source fails now, naming the topic, partition, offsets and
// the limit.
func TestBatchOverTheDecompressLimitFailsTheSource(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	g := &gated{gate: make(chan struct{})}
	close(g.gate)
	m := startMember(t, "a", WithBrokers(addrs...), WithGroup("bomb"), WithTopics("readings"), WithPartitions(g),
		WithClientOptions(kgo.MaxDecompressBatchBytes(64<<10), kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)))
	require.Eventually(t, func() bool { return m.src.Stats().Owned == 1 }, 20*time.Second, 5*time.Millisecond)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte("s1"), Value: make([]byte, 256<<10)}).FirstErr())

	select {
	case err := <-m.done:
		require.Error(t, err)
		require.ErrorIs(t, err, kgo.ErrMaxDecompress)
		require.ErrorContains(t, err, `partition readings/0`)
		require.ErrorContains(t, err, "offsets 0 to 0")
		require.ErrorContains(t, err, "65536 bytes")
	case <-ctx.Done():
		t.Fatalf("the source did not fail: the partition stalls behind the batch (handled %d)", g.handled.Load())
	}
}
