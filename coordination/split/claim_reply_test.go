package split_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
)

// replyLostStore lands the first Update of key but answers it with a
// Retryable error, as a store call cut off at its deadline after the write
// was sent does.
type replyLostStore struct {
	coordination.Store
	key  string
	lost atomic.Bool
}

func (r *replyLostStore) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	out, err := r.Store.Update(ctx, ks, key, v, rev)
	if key == r.key && err == nil && out.Won() && r.lost.CompareAndSwap(false, true) {
		return coordination.Lost, coordination.Retryable("update", ks, key, errors.New("reply lost (fault injected)"))
	}
	return out, err
}

// TestClaimWhoseProgressReplyWasLostIsNoFailedTenancy: a claim whose
// progress CAS landed with its reply lost made the record say Owned by
// this worker with no tenancy behind it; the next claim counted that as a
// failed tenancy, so store timeouts alone could quarantine a healthy
// split (here at once, with one attempt allowed). The claim now finds its
// own write and goes on with it.
func TestClaimWhoseProgressReplyWasLostIsNoFailedTenancy(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := split.NewVirtualMem(t, ttl)
	ctx := context.Background()
	require.NoError(t, split.AddSplits(ctx, mem, split.Spec{ID: "s1", Weight: 1}))
	store := &replyLostStore{Store: mem, key: "prog.s1"}
	runCtx, cancel := context.WithCancel(ctx)
	w, done := runW1(t, runCtx, store, clk, untilRevoked, split.WithMaxAttempts(1))
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	quarantined := func() bool {
		e, err := mem.Get(ctx, coordination.Durable, "prog.s1")
		require.NoError(t, err)
		var p split.Progress
		require.NoError(t, json.Unmarshal(e.Value, &p))
		return p.Status == split.StatusQuarantined
	}
	split.AdvanceUntil(t, clk, w, ttl, func() bool { return len(w.Held()) == 1 || quarantined() }, "w1 claims s1 or quarantines it")
	require.True(t, store.lost.Load(), "the fault was injected")
	require.False(t, quarantined(), "a claim whose reply was lost quarantined the split")
	ten, ok := w.Tenancy("s1")
	require.True(t, ok)
	require.EqualValues(t, 1, ten.Epoch(), "the claim went on with the write that landed")
}
