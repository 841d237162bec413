package kafka

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// stuckFirstOwnership is a ledger member whose first ownership's handler
// waits in its first Handle until the partition is released (a stuck
// sink): it applies nothing. Later ownerships are plain ledger ones.
type stuckFirstOwnership struct {
	ledgerMember
	opens   atomic.Int32
	entered chan struct{}
}

func (m *stuckFirstOwnership) Open(ctx context.Context, a Assignment) (PartitionHandler, int64, error) {
	h, last, err := m.ledgerMember.Open(ctx, a)
	if err != nil || m.opens.Add(1) > 1 {
		return h, last, err
	}
	return stuckPart{h.(*ledgerPart), m.entered}, last, nil
}

type stuckPart struct {
	*ledgerPart
	entered chan struct{}
}

func (s stuckPart) Handle(ctx context.Context, _ []*kgo.Record) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

// TestRecordsPolledBeforeALostSessionDoNotReachTheRegainedPartition: the
// poll loop holds records of a partition (polled after the ones its stuck
// handler has and the one queued) when the member's session is lost and
// the group gives it the partition back. The new ownership restores the
// last checkpoint (none: offset -1) and must get the partition's records
// from there, in order. Bug: the held records were handed to the new
// ownership first (its handler saw offset 10 after -1), the dropped queued
// batch never came, and the records it did get came again from the
// restored offset.
func TestRecordsPolledBeforeALostSessionDoNotReachTheRegainedPartition(t *testing.T) {
	const n = 30
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	produceReadings(t, addrs, sensorKeys(1), 1, n)
	l := newLedger()
	m := &stuckFirstOwnership{ledgerMember: ledgerMember{l, "m"}, entered: make(chan struct{})}
	src, err := NewSource(WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"), WithPartitions(m), WithQueueDepth(1),
		WithClientOptions(kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)))
	require.NoError(t, err)
	src.cfg.maxPoll = 5
	// The third poll with records (its handler stuck on the first, the
	// second queued) is held until the partition is regained.
	held, release := make(chan struct{}), make(chan struct{})
	polls := 0
	src.polled = func(fs kgo.Fetches) {
		if fs.NumRecords() == 0 {
			return
		}
		if polls++; polls == 3 {
			close(held)
			<-release
		}
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(context.Background()) }()
	t.Cleanup(func() { _ = src.Close() })
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhold)

	for _, ch := range []chan struct{}{m.entered, held} {
		select {
		case <-ch:
		case err := <-done:
			t.Fatalf("Run returned %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("the first ownership did not get stuck with a poll held")
		}
	}
	p := Partition{"readings", 0}
	src.mu.Lock()
	first := src.parts[p]
	src.mu.Unlock()
	require.NotNil(t, first)

	// The coordinator forgets the member: its partition is lost, and
	// given back to it when it rejoins.
	var forget atomic.Bool
	forget.Store(true)
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !forget.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	require.Eventually(t, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.parts[p] == nil
	}, 20*time.Second, 5*time.Millisecond, "the lost session released the partition")
	forget.Store(false)
	require.Eventually(t, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		w := src.parts[p]
		return w != nil && w != first
	}, 20*time.Second, 5*time.Millisecond, "the partition was not regained")

	unhold()
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i)
	}
	handled := func() []int64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.Clone(l.handled[p])
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(handled()) < n && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v; handled %v", err, handled())
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.Equal(t, want, handled(), "the regained partition got its records from the restored offset, each once")
	require.NoError(t, src.Close())
	require.NoError(t, <-done)
}
