package split_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination/split"
)

// TestWorkerErrReportsLeases: Err is what a supervisor (the lease
// activity) polls. It is nil while the presence lease is renewed, names
// the worker and wraps ErrLeasesExpired once no renewal landed for a TTL,
// clears when the store is reachable again, and reports why Run ended.
func TestWorkerErrReportsLeases(t *testing.T) {
	c := newCluster(t, 4)
	n := c.start("w1")
	c.until("w1 registered", func() bool { return closed(n.w.Registered()) })
	require.NoError(t, n.w.Err())
	c.until("w1 holds the splits", func() bool { return len(n.w.Held()) == 4 })
	c.runFor(ttl)
	require.NoError(t, n.w.Err(), "renewals land: no error")

	n.link.Cut(true)
	c.until("Err reports the expired leases", func() bool { return n.w.Err() != nil })
	err := n.w.Err()
	require.ErrorIs(t, err, split.ErrLeasesExpired)
	require.Contains(t, err.Error(), `worker "w1"`)
	require.Empty(t, n.w.Held(), "its tenancies self-fenced by then")

	n.link.Cut(false)
	c.until("Err clears once a renewal lands", func() bool { return n.w.Err() == nil })

	n.cancel()
	c.until("Run returns", func() bool { return closed(n.w.Stopped()) })
	require.ErrorIs(t, n.w.Err(), split.ErrWorkerStopped)
}

// TestWorkerErrNamesTwin: a second live process with the same id never
// registers, and its Err is Run's ErrDuplicateWorker.
func TestWorkerErrNamesTwin(t *testing.T) {
	c := newCluster(t, 2)
	c.start("w1")
	c.until("w1 holds the splits", func() bool { return len(c.live()[0].w.Held()) == 2 })
	twin := c.start("w1")
	require.Error(t, twin.w.Err(), "not registered yet")
	c.until("the twin stops", func() bool { return closed(twin.w.Stopped()) })
	require.ErrorIs(t, twin.w.Err(), split.ErrDuplicateWorker)
	require.False(t, closed(twin.w.Registered()), "the twin registered")
	c.mu.Lock()
	twin.dead = true
	c.mu.Unlock()
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
