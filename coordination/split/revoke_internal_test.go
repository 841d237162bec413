package split

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestRevokingAnEndedTenancyLeavesDrainingAlone: the control loop and the
// shutdown revoke the tenancies they listed a moment before; one that
// ended meanwhile (its handler released it) was counted as draining, and
// as drop had already run nothing ever took it off: the draining gauge
// stayed one too high for good.
func TestRevokingAnEndedTenancyLeavesDrainingAlone(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := NewVirtualMem(t, ttl)
	ctx := context.Background()
	require.NoError(t, AddSplits(ctx, mem, Spec{ID: "s1", Weight: 1}))
	stop := make(chan struct{})
	m := NewMetrics(nil)
	w, err := NewWorker(mem, "w1", WithClock(clk), WithMetrics(m), WithHandler(func(ctx context.Context, ten *Tenancy) error {
		if ten.Epoch() == 1 {
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ten.Revoking():
		case <-ctx.Done():
		}
		return nil
	}))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	AdvanceUntil(t, clk, w, ttl, func() bool { return len(w.Held()) == 1 }, "w1 claims s1")
	first, ok := w.Tenancy("s1")
	require.True(t, ok)

	close(stop) // the handler returns: the tenancy is released and dropped
	require.Eventually(t, func() bool {
		cur, ok := w.Tenancy("s1")
		return !ok || cur != first
	}, 10*time.Second, time.Millisecond, "the first tenancy ended")
	w.revoke(first) // what a control loop step that listed it a moment before does
	require.Zero(t, testutil.ToFloat64(m.Draining.WithLabelValues("w1")), "an ended tenancy is not draining")
}
