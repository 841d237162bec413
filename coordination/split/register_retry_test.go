package split_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/split"
)

// failFirstCreate fails the first Create with a Retryable error.
type failFirstCreate struct {
	coordination.Store
	failed atomic.Bool
}

func (f *failFirstCreate) Create(ctx context.Context, ks coordination.Keyspace, key string, v []byte) (coordination.CasOutcome, error) {
	if f.failed.CompareAndSwap(false, true) {
		return coordination.Lost, coordination.Retryable("create", ks, key, errors.New("store unreachable (fault injected)"))
	}
	return f.Store.Create(ctx, ks, key, v)
}

// TestRegistrationRetriesAtTheRetryInterval: WithRetryInterval is the
// back-off between failed store calls, registration included; a failed
// presence write was retried only after a third of the lease TTL.
func TestRegistrationRetriesAtTheRetryInterval(t *testing.T) {
	const ttl, retry = 3 * time.Second, 100 * time.Millisecond
	clk, mem := split.NewVirtualMem(t, ttl)
	store := &failFirstCreate{Store: mem}
	ctx, cancel := context.WithCancel(context.Background())
	w, done := runW1(t, ctx, store, clk, untilStopped, split.WithRetryInterval(retry))
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	// Before it registers the worker has one timer: the back-off.
	require.Eventually(t, func() bool { return store.failed.Load() && clk.Pending() == 1 }, 10*time.Second, time.Millisecond, "the first presence write failed")
	clk.Advance(retry)
	require.Eventually(t, func() bool { return closed(w.Registered()) }, 10*time.Second, time.Millisecond,
		"registered one retry interval after the failure")
}

// TestErrAfterStopBeforeRegistration: a worker stopped before its presence
// was registered reports, like any stopped worker, ErrWorkerStopped naming
// it, not a bare "context canceled".
func TestErrAfterStopBeforeRegistration(t *testing.T) {
	mem, err := memstore.New()
	require.NoError(t, err)
	w, err := split.NewWorker(mem, "w1", split.WithHandler(untilStopped))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runErr := w.Run(ctx)
	require.ErrorIs(t, runErr, context.Canceled)
	require.False(t, closed(w.Registered()))
	require.ErrorIs(t, w.Err(), split.ErrWorkerStopped)
	require.Contains(t, w.Err().Error(), `worker "w1"`)
}
