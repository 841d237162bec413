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

// gateStore holds back the reply of one armed Update of key (it lands in
// the store at once; the caller hears of it only when the test opens the
// gate) and reports the Deletes of key: a renewal racing a release.
type gateStore struct {
	coordination.Store
	key string

	mu      sync.Mutex
	armed   bool
	landed  chan struct{} // closed once the armed Update landed
	open    chan struct{} // closed by the test to deliver its reply
	deleted chan struct{} // gets a value per Delete of key
}

func newGateStore(s coordination.Store, key string) *gateStore {
	return &gateStore{Store: s, key: key, landed: make(chan struct{}), open: make(chan struct{}), deleted: make(chan struct{}, 16)}
}

func (g *gateStore) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *gateStore) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	out, err := g.Store.Update(ctx, ks, key, v, rev)
	if key != g.key {
		return out, err
	}
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.landed)
		<-g.open
	}
	return out, err
}

func (g *gateStore) Delete(ctx context.Context, ks coordination.Keyspace, key string, rev coordination.Revision) (coordination.CasOutcome, error) {
	out, err := g.Store.Delete(ctx, ks, key, rev)
	if key == g.key {
		select {
		case g.deleted <- struct{}{}:
		default:
		}
	}
	return out, err
}

// TestReleaseRacingARenewalFreesTheLease: a renewal whose lease write
// lands while the handler releases the split moves the lease past the
// revision the release deletes at. The lease must still go at once, or the
// split's next owner waits a whole TTL for it to expire.
func TestReleaseRacingARenewalFreesTheLease(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := split.NewVirtualMem(t, ttl)
	ctx := context.Background()
	require.NoError(t, split.AddSplits(ctx, mem, split.Spec{ID: "s1", Weight: 1}))
	gate := newGateStore(mem, "lease.s1")

	stop := make(chan struct{})
	runCtx, cancel := context.WithCancel(ctx)
	w, done := runW1(t, runCtx, gate, clk, func(ctx context.Context, ten *split.Tenancy) error {
		if ten.Epoch() > 1 {
			return untilRevoked(ctx, ten) // the next tenancy keeps the split
		}
		select {
		case <-stop:
		case <-ctx.Done():
		}
		return nil
	})
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	// Virtual time passes only while the worker has caught up with its
	// renewals: it must never outrun them.
	split.AdvanceUntil(t, clk, w, ttl, func() bool { return len(w.Held()) == 1 }, "w1 claims s1")

	gate.arm()
	split.AdvanceUntil(t, clk, w, ttl, func() bool { return closed(gate.landed) }, "a renewal of the lease lands")

	close(stop) // the handler returns: release
	select {
	case <-gate.deleted:
	case <-time.After(30 * time.Second):
		t.Fatal("the release never deleted the lease")
	}
	close(gate.open) // the renewal hears it landed

	// The plan still gives s1 to w1, which claims it again as soon as the
	// lease is gone; virtual time stands still, so no lease can expire.
	require.Eventually(t, func() bool {
		ten, ok := w.Tenancy("s1")
		return ok && ten.Epoch() == 2
	}, 10*time.Second, time.Millisecond, "w1 claims s1 again at epoch 2: the released lease was deleted")
}
