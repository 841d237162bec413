package split

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/vclock"
)

// NewVirtualMem returns a virtual clock and an in-memory store on it whose
// leases last ttl.
func NewVirtualMem(t testing.TB, ttl time.Duration) (*vclock.Clock, *memstore.Store) {
	t.Helper()
	clk := vclock.New(time.Unix(1_800_000_000, 0))
	mem, err := memstore.New(memstore.WithClock(clk), memstore.WithLeaseTTL(ttl))
	require.NoError(t, err)
	return clk, mem
}

// AdvanceUntil moves virtual time on in steps of 100 ms, but only while w
// has caught up with its renewals (it must never outrun them), until done
// holds.
func AdvanceUntil(t testing.TB, clk *vclock.Clock, w *Worker, ttl time.Duration, done func() bool, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		if done() {
			return true
		}
		if clk.Now().Sub(w.LastRenewal()) <= ttl/3 {
			clk.Advance(100 * time.Millisecond)
		}
		return false
	}, 30*time.Second, time.Millisecond, msg)
}
