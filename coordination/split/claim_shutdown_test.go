package split_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
)

// stopper stops the worker (stop cancels Run's context) at the first call
// its store wrapper picks, and closes hit.
type stopper struct {
	stop context.CancelFunc
	once sync.Once
	hit  chan struct{}
}

func newStopper(stop context.CancelFunc) *stopper {
	return &stopper{stop: stop, hit: make(chan struct{})}
}

// fire stops the worker the first time it is called, and reports whether
// this call did.
func (s *stopper) fire() bool {
	first := false
	s.once.Do(func() {
		first = true
		s.stop()
		close(s.hit)
	})
	return first
}

// fired reports whether the worker was stopped (advanceUntil's condition).
func (s *stopper) fired() bool { return closed(s.hit) }

// cutOff answers a store call (op of key) that landed while the worker was
// stopped as one whose context ended while it was in flight does: with the
// context's error when the call's own context ended, else with what the
// store said (out, err).
func cutOff(ctx context.Context, op string, ks coordination.Keyspace, key string, out coordination.CasOutcome, err error) (coordination.CasOutcome, error) {
	if ctx.Err() != nil {
		return coordination.Lost, coordination.Retryable(op, ks, key, ctx.Err())
	}
	return out, err
}

// requireRunReturns waits for Run's result on done and requires no error.
func requireRunReturns(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
}

// stopDuringStore lands the first Update of key, then stops the worker
// (stop cancels Run's context) and answers as a store call does whose
// context ended while it was in flight: with the context's error when the
// call's own context ended, else with what the store said.
type stopDuringStore struct {
	coordination.Store
	key string
	*stopper
}

func (s *stopDuringStore) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	out, err := s.Store.Update(ctx, ks, key, v, rev)
	if key != s.key || err != nil || !out.Won() || !s.fire() {
		return out, err
	}
	return cutOff(ctx, "update", ks, key, out, err)
}

// TestShutdownDuringAClaimLeavesNoLeaseOrOwnedRecord: a claim ran on Run's
// context, so a graceful stop arriving while its progress CAS was in
// flight cut the CAS off after it landed, and then the claim's own
// clean-up (the read that finds its write, the delete of the lease) failed
// on the ended context too. The stopped worker left its lease for a whole
// TTL (nobody could claim the split) and the record Owned with no tenancy
// behind it, which the next claim counts as a failed tenancy (with one
// attempt allowed, a quarantine). A claim now runs to its end under its
// own deadline, and the shutdown releases what it claimed.
func TestShutdownDuringAClaimLeavesNoLeaseOrOwnedRecord(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := split.NewVirtualMem(t, ttl)
	ctx := context.Background()
	require.NoError(t, split.AddSplits(ctx, mem, split.Spec{ID: "s1", Weight: 1}))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := &stopDuringStore{Store: mem, key: "prog.s1", stopper: newStopper(cancel)}
	w, done := runW1(t, runCtx, store, clk, untilRevoked, split.WithMaxAttempts(1))
	split.AdvanceUntil(t, clk, w, ttl, store.fired, "w1 claims s1 and is stopped while it does")
	requireRunReturns(t, done)

	_, err := mem.Get(ctx, coordination.Ephemeral, "lease.s1")
	require.ErrorIs(t, err, coordination.ErrNotFound, "the stopped worker left its lease of s1 behind")
	e, err := mem.Get(ctx, coordination.Durable, "prog.s1")
	require.NoError(t, err)
	var p split.Progress
	require.NoError(t, json.Unmarshal(e.Value, &p))
	require.NotEqual(t, split.StatusOwned, p.Status, "the stopped worker left s1 Owned with no tenancy: %+v", p)
}

// stopDuringPlanStore lands the first Create of the plan record, then
// stops the worker and answers as stopDuringStore does.
type stopDuringPlanStore struct {
	coordination.Store
	*stopper
}

func (s *stopDuringPlanStore) Create(ctx context.Context, ks coordination.Keyspace, key string, v []byte) (coordination.CasOutcome, error) {
	out, err := s.Store.Create(ctx, ks, key, v)
	if key != "plan" || err != nil || !out.Won() || !s.fire() {
		return out, err
	}
	return cutOff(ctx, "create", ks, key, out, err)
}

// TestShutdownDuringAnElectionLeavesNoLeaderKey: an election ran on Run's
// context, so a graceful stop arriving while the new leader's plan write
// was in flight cut it off, and the delete of the leader key that backs
// out of a failed election failed on the ended context too: the stopped
// worker's leader key stayed a whole TTL, and no other worker could lead
// meanwhile. An election now runs to its end under its own deadline, and
// the shutdown withdraws the leadership it won.
func TestShutdownDuringAnElectionLeavesNoLeaderKey(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := split.NewVirtualMem(t, ttl)
	ctx := context.Background()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := &stopDuringPlanStore{Store: mem, stopper: newStopper(cancel)}
	w, done := runW1(t, runCtx, store, clk, untilStopped)
	split.AdvanceUntil(t, clk, w, ttl, store.fired, "w1 runs for leadership and is stopped while it does")
	requireRunReturns(t, done)
	_, err := mem.Get(ctx, coordination.Ephemeral, "leader")
	require.ErrorIs(t, err, coordination.ErrNotFound, "the stopped worker left its leader key behind")
}

// losePlanStore answers the first Update of the plan record as a lost CAS
// (another leader's plan got there first) and stops the worker meanwhile.
type losePlanStore struct {
	coordination.Store
	*stopper
}

func (s *losePlanStore) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	if key != "plan" || !s.fire() {
		return s.Store.Update(ctx, ks, key, v, rev)
	}
	return coordination.Lost, nil
}

// TestShutdownDuringAStepDownLeavesNoLeaderKey: a leader that steps down
// deletes its leader key on Run's context, and is no longer the leader the
// shutdown's withdrawal deletes the key of; stepping down as a graceful
// stop arrived left the key a whole TTL, with nobody leading.
func TestShutdownDuringAStepDownLeavesNoLeaderKey(t *testing.T) {
	const ttl = 3 * time.Second
	clk, mem := split.NewVirtualMem(t, ttl)
	ctx := context.Background()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := &losePlanStore{Store: mem, stopper: newStopper(cancel)}
	w, done := runW1(t, runCtx, store, clk, untilStopped)
	split.AdvanceUntil(t, clk, w, ttl, w.IsLeader, "w1 leads")
	require.NoError(t, split.AddSplits(ctx, mem, split.Spec{ID: "s1", Weight: 1}))
	split.AdvanceUntil(t, clk, w, ttl, store.fired, "w1 publishes a plan, loses its CAS and is stopped meanwhile")
	requireRunReturns(t, done)
	_, err := mem.Get(ctx, coordination.Ephemeral, "leader")
	require.ErrorIs(t, err, coordination.ErrNotFound, "the stopped worker left its leader key behind")
}
