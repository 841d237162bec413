package kafka

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStopReportsAPartitionClosedWithoutARevoke: franz-go's Close revokes
// every partition the client holds as it leaves the group (or reported it
// lost before), so a partition the Source still owns after Close was never
// revoked: its final checkpoint was skipped. The stop must say so, naming
// the partition, not return nil as if every final checkpoint was taken.
// The partition is injected into the Source's table (the client never
// owned it), standing in for any disagreement between the two.
func TestStopReportsAPartitionClosedWithoutARevoke(t *testing.T) {
	c := newCluster(t, 4)
	addrs := c.ListenAddrs()
	l := newLedger()
	m := startMember(t, "a", WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"), WithPartitions(l.as("a")))
	require.Eventually(t, func() bool { return m.src.Stats().Owned == 4 }, 20*time.Second, 5*time.Millisecond)

	p := Partition{"readings", 9}
	h := &ledgerPart{l: l, name: "a", a: Assignment{Partition: p}, last: -1}
	w := newPartition(m.src, p, m.src.router.AssignmentEpoch(), h, -1)
	m.src.mu.Lock()
	m.src.parts[p] = w
	m.src.mu.Unlock()
	go w.run()

	require.NoError(t, m.src.Close())
	var err error
	select {
	case err = <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the member did not stop")
	}
	var pe *PartitionError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, p, pe.Partition)
	require.ErrorContains(t, err, "readings/9")
	require.ErrorContains(t, err, "final checkpoint skipped")
	require.NotContains(t, err.Error(), "readings/0", "revoked partitions took their final checkpoint")
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Contains(t, l.events, "a release readings/9 final=false at -1")
}
