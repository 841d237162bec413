package split_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
)

// holdStore holds one armed Update of key before it reaches the store,
// until the gate opens or the call's context ends (as a real store call
// would). The first Delete of the leader key opens the gate and waits for
// that Update to finish: a renewal landing while the shutdown withdraws
// leadership and presence.
type holdStore struct {
	coordination.Store
	key string

	mu       sync.Mutex
	armed    bool
	held     chan struct{} // closed once the armed Update is held
	open     chan struct{} // closed to let it through
	finished chan struct{} // closed once it returned
	openOnce sync.Once
}

func (h *holdStore) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	if key != h.key {
		return h.Store.Update(ctx, ks, key, v, rev)
	}
	h.mu.Lock()
	armed := h.armed
	h.armed = false
	h.mu.Unlock()
	if !armed {
		return h.Store.Update(ctx, ks, key, v, rev)
	}
	defer close(h.finished)
	close(h.held)
	select {
	case <-h.open:
	case <-ctx.Done():
		return coordination.Lost, coordination.Retryable("update", ks, key, ctx.Err())
	}
	return h.Store.Update(ctx, ks, key, v, rev)
}

func (h *holdStore) Delete(ctx context.Context, ks coordination.Keyspace, key string, rev coordination.Revision) (coordination.CasOutcome, error) {
	if key == "leader" {
		h.openOnce.Do(func() { close(h.open) })
		<-h.finished
	}
	return h.Store.Delete(ctx, ks, key, rev)
}

// TestShutdownWithdrawsPresenceDespiteARenewal: a presence renewal landing
// while Run's shutdown withdraws leadership and presence moves the
// presence past the revision the withdrawal deletes at (or, landing after
// it, writes it back): the stopped worker counts as live for a whole TTL,
// and the leader keeps assigning it splits nobody runs.
func TestShutdownWithdrawsPresenceDespiteARenewal(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := split.NewVirtualMem(t, ttl)
	ctx := context.Background()
	hold := &holdStore{Store: mem, key: "worker.w1", held: make(chan struct{}), open: make(chan struct{}), finished: make(chan struct{})}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, done := runW1(t, runCtx, hold, clk, untilStopped)
	require.Eventually(t, w.IsLeader, 30*time.Second, time.Millisecond, "w1 leads")

	hold.mu.Lock()
	hold.armed = true
	hold.mu.Unlock()
	split.AdvanceUntil(t, clk, w, ttl, func() bool { return closed(hold.held) }, "a presence renewal is in flight")

	cancel() // graceful stop while the renewal is in flight
	requireRunReturns(t, done)
	_, err := mem.Get(ctx, coordination.Ephemeral, "worker.w1")
	require.ErrorIs(t, err, coordination.ErrNotFound, "the stopped worker's presence is gone")
}
