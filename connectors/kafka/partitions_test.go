package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ledger is a Partitions runtime for tests: each partition's "state" is
// the offset of the last record handled, "checkpointed" by a final
// Release and restored by the next Open. It records every record handed
// to every member.
type ledger struct {
	mu      sync.Mutex
	saved   map[Partition]int64 // last checkpointed offset per partition
	handled map[Partition][]int64
	opens   []Assignment
	events  []string
	member  map[*ledgerPart]string
}

type ledgerPart struct {
	l      *ledger
	name   string
	a      Assignment
	last   int64
	closed bool
}

func newLedger() *ledger {
	return &ledger{saved: map[Partition]int64{}, handled: map[Partition][]int64{}, member: map[*ledgerPart]string{}}
}

func (l *ledger) as(name string) Partitions { return ledgerMember{l, name} }

type ledgerMember struct {
	l    *ledger
	name string
}

func (m ledgerMember) Open(_ context.Context, a Assignment) (PartitionHandler, int64, error) {
	l := m.l
	l.mu.Lock()
	defer l.mu.Unlock()
	last, ok := l.saved[a.Partition]
	if !ok {
		last = -1
	}
	l.opens = append(l.opens, a)
	l.events = append(l.events, fmt.Sprintf("%s open %s at %d", m.name, a.Partition, last))
	return &ledgerPart{l: l, name: m.name, a: a, last: last}, last, nil
}

func (p *ledgerPart) Handle(_ context.Context, recs []*kgo.Record) error {
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.closed {
		return errors.New("Handle after Release")
	}
	for _, r := range recs {
		if r.Topic != p.a.Partition.Topic || r.Partition != p.a.Partition.Partition {
			return fmt.Errorf("record of %s/%d handed to %s", r.Topic, r.Partition, p.a.Partition)
		}
		if r.Offset != p.last+1 {
			return fmt.Errorf("%s: offset %d after %d", p.a.Partition, r.Offset, p.last)
		}
		p.last = r.Offset
		l.handled[p.a.Partition] = append(l.handled[p.a.Partition], r.Offset)
	}
	return nil
}

func (p *ledgerPart) Release(_ context.Context, final bool) error {
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	p.closed = true
	if final {
		l.saved[p.a.Partition] = p.last
	}
	l.events = append(l.events, fmt.Sprintf("%s release %s final=%v at %d", p.name, p.a.Partition, final, p.last))
	return nil
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, h := range l.handled {
		n += len(h)
	}
	return n
}

// TestPartitionsHandOffThroughTheRuntime: with WithPartitions the Source
// keeps no state: it opens each gained partition through the runtime
// (which says where to resume), hands it the partition's records in
// offset order, and releases it on revoke after its goroutine stopped.
// A partition moving between members continues exactly after the offset
// the old owner's final Release checkpointed: every record is handed
// once, in order, with no gap.
func TestPartitionsHandOffThroughTheRuntime(t *testing.T) {
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(16)
	l := newLedger()
	opts := func(name string) []SourceOption {
		return []SourceOption{WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"), WithPartitions(l.as(name)),
			WithClientOptions(kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond))}
	}
	_, err := NewSource(WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"))
	require.ErrorContains(t, err, "WithPartitions")

	a := startMember(t, "a", opts("a")...)
	produceReadings(t, addrs, keys, 1, 50)
	require.Eventually(t, func() bool { return l.count() == 16*50 }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(16*50), a.src.Stats().Applied)

	b := startMember(t, "b", opts("b")...)
	require.Eventually(t, func() bool { return b.src.Stats().Owned > 0 && a.src.Stats().Owned > 0 }, 20*time.Second, 5*time.Millisecond)
	produceReadings(t, addrs, keys, 51, 100)
	require.Eventually(t, func() bool { return l.count() == 16*100 }, 20*time.Second, 5*time.Millisecond)
	a.stop(t)
	b.stop(t)

	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0
	for p, offs := range l.handled {
		for i, o := range offs {
			require.Equal(t, int64(i), o, "partition %s: every offset once, in order", p)
		}
		total += len(offs)
	}
	require.Equal(t, 16*100, total)
	for _, o := range l.opens {
		require.Equal(t, "central", o.Group)
		require.NotNil(t, o.Cursors)
		require.Positive(t, o.Epoch)
		require.Equal(t, parts, o.TopicPartitions)
	}
	require.Greater(t, len(l.opens), parts, "some partition moved: %v", l.events)
	t.Log(l.events)
}
