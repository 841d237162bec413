package split

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination/memstore"
)

// TestOwnedGaugeMatchesHeldAfterConcurrentDrops: drop counted the held
// splits under the worker's lock but set tflo_split_owned after releasing
// it, so two tenancies ending at once (a self-fence timer, a handler's
// release, the renewal loop) could set their counts in the opposite
// order and leave the gauge at a split that was no longer held.
func TestOwnedGaugeMatchesHeldAfterConcurrentDrops(t *testing.T) {
	mem, err := memstore.New(memstore.WithLeaseTTL(3 * time.Second))
	require.NoError(t, err)
	m := NewMetrics(nil)
	w, err := NewWorker(mem, "w1", WithMetrics(m), WithHandler(func(context.Context, *Tenancy) error { return nil }))
	require.NoError(t, err)
	const splits = 8
	for round := range 300 {
		ts := make([]*Tenancy, 0, splits)
		w.mu.Lock()
		for i := range splits {
			ctx, cancel := context.WithCancel(context.Background())
			ten := &Tenancy{w: w, spec: Spec{ID: SplitID(fmt.Sprintf("s%d", i)), Weight: 1}, epoch: 1,
				ctx: ctx, cancel: cancel, revoking: make(chan struct{}), handled: make(chan struct{})}
			w.held[ten.spec.ID] = ten
			ts = append(ts, ten)
		}
		w.mu.Unlock()
		m.Owned.WithLabelValues("w1").Set(splits)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, ten := range ts {
			wg.Go(func() {
				<-start
				w.drop(ten, LossSelfFence)
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, w.Held())
		require.Zero(t, testutil.ToFloat64(m.Owned.WithLabelValues("w1")), "round %d: no split is held", round)
	}
}
