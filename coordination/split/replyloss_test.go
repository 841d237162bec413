package split_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
)

// errReplyLost is what a caller gets for a write that landed but whose
// reply never arrived (a NATS request whose reply is lost, or the
// metered wrapper's per-operation deadline passing after the request was
// sent: both are Retryable, and the write may have landed).
var errReplyLost = errors.New("reply lost after the write landed (fault injected)")

// replyLoss performs the next Update of an armed key, then reports a
// Retryable error as if the reply had been lost.
type replyLoss struct {
	coordination.Store

	mu    sync.Mutex
	armed map[string]int // key -> how many updates still to "lose"
	hits  int
}

func (r *replyLoss) arm(key string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed == nil {
		r.armed = map[string]int{}
	}
	r.armed[key] = n
}

func (r *replyLoss) fired() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits
}

func (r *replyLoss) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	out, err := r.Store.Update(ctx, ks, key, v, rev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && out.Won() && r.armed[key] > 0 {
		r.armed[key]--
		r.hits++
		return coordination.Lost, coordination.Retryable("update", ks, key, errReplyLost)
	}
	return out, err
}

// newLossyCluster is a cluster whose shared store loses the replies of
// armed updates.
func newLossyCluster(t *testing.T, nSplits int) (*cluster, *replyLoss) {
	c := newCluster(t, nSplits)
	rl := &replyLoss{Store: c.mem}
	c.audit.Store = rl
	return c, rl
}

// The tests below lose the reply of a write that landed, as a store call
// cut off at its deadline after the request was sent does (the metered
// store's per-call deadline, a NATS reply lost): the worker must take up
// the revision it never heard of, not act as if another wrote it.

// TestPresenceRenewalReplyLost: one presence renewal whose write landed
// but whose reply was lost. The worker renews at the revision it finds,
// its own. Before, every later renewal lost its CAS, the Get showed its
// own instance and nothing was done: no renewal landed until the key
// expired, so Err reported ErrLeasesExpired (the lease activity failed,
// /readyz went red) and the presence key disappeared for a while (the
// leader saw the worker gone).
func TestPresenceRenewalReplyLost(t *testing.T) {
	c, rl := newLossyCluster(t, 2)
	n := c.start("w1")
	c.until("w1 holds the splits", func() bool { return len(n.w.Held()) == 2 })
	c.runFor(ttl)
	require.NoError(t, n.w.Err())

	rl.arm("worker.w1", 1)
	c.until("the lost reply is injected", func() bool { return rl.fired() == 1 })

	var errSeen error
	absent := false
	end := c.clk.Now().Add(3 * ttl)
	c.until("three lease TTLs pass", func() bool {
		if err := n.w.Err(); err != nil && errSeen == nil {
			errSeen = err
		}
		if _, err := c.mem.Get(context.Background(), coordination.Ephemeral, "worker.w1"); errors.Is(err, coordination.ErrNotFound) {
			absent = true
		}
		return !c.clk.Now().Before(end)
	})
	require.NoError(t, errSeen, "one lost reply of a presence renewal made the worker report its leases expired")
	require.False(t, absent, "one lost reply of a presence renewal let the presence key expire")
}

// TestTenancyWriteReplyLost: a tenancy's write whose reply was lost
// after it landed, then its next write. The tenancy keeps its split at
// its epoch. Before, the next write CASed at the stale revision and lost:
//   - a lease renewal dropped the tenancy as LossLeaseLost although the
//     lease in the store was its own (same instance, same epoch): the lease
//     key was left until it expired, the split idle meanwhile, and the next
//     claim counted the tenancy as failed (attempts+1, towards quarantine);
//   - a Commit retried after the store error ("retry", says its doc) fenced
//     the tenancy (LossFenced) though no other owner existed.
func TestTenancyWriteReplyLost(t *testing.T) {
	for _, tc := range []struct{ name, key, loss string }{
		{"lease renewal", "lease.s000", split.LossLeaseLost},
		{"commit", "prog.s000", split.LossFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rl := newLossyCluster(t, 1)
			n := c.start("w1")
			c.until("w1 holds the split", func() bool { return len(n.w.Held()) == 1 })
			c.runFor(ttl)
			tn, ok := n.w.Tenancy("s000")
			require.True(t, ok)
			epoch := tn.Epoch()
			before := counter(c.metrics, "w1", tc.loss)

			rl.arm(tc.key, 1)
			c.until("the lost reply is injected", func() bool { return rl.fired() == 1 })
			c.runFor(2 * ttl)

			require.Equal(t, before, counter(c.metrics, "w1", tc.loss), "the tenancy lost its split to its own landed write")
			tn2, ok := n.w.Tenancy("s000")
			require.True(t, ok, "w1 no longer holds s000")
			require.Equal(t, epoch, tn2.Epoch(), "s000 was reclaimed at a new epoch")
			require.False(t, strings.Contains(c.dump(), "quarantined"))
		})
	}
}

// TestReleaseAfterLostCommitReply: a handler's last Commit lands with its
// reply lost, and the handler returns (done): the release writes at the
// revision the lost write made, the split is Released with the landed
// watermark and no failed attempt, and its next tenancy resumes from it.
// Before, the release CASed at the stale revision and ended as
// LossFenced, the lease was left to expire, and the next claim counted a
// failed attempt.
func TestReleaseAfterLostCommitReply(t *testing.T) {
	c, rl := newLossyCluster(t, 1)
	commitErr := make(chan error, 1)
	type resumed struct {
		watermark uint64
		epoch     uint64
	}
	next := make(chan resumed, 1)
	var calls atomic.Int32
	h := func(ctx context.Context, tn *split.Tenancy) error {
		if calls.Add(1) > 1 {
			next <- resumed{tn.Resume().Watermark, uint64(tn.Epoch())}
			<-ctx.Done()
			return ctx.Err()
		}
		rl.arm("prog.s000", 1)
		commitErr <- tn.Commit(ctx, 5, []byte("state@5"))
		return nil // done: the tenancy releases its split
	}
	c.start("w1", split.WithHandler(h))
	var err error
	c.until("the first tenancy commits", func() bool {
		select {
		case err = <-commitErr:
			return true
		default:
			return false
		}
	})
	require.ErrorIs(t, err, errReplyLost)
	var r resumed
	c.until("the split is claimed again", func() bool {
		select {
		case r = <-next:
			return true
		default:
			return false
		}
	})
	require.Equal(t, 0.0, counter(c.metrics, "w1", split.LossFenced), "the release was fenced by the tenancy's own landed commit")
	require.Equal(t, uint64(5), r.watermark, "the next tenancy resumes from the landed commit")
	v, err := split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	require.Zero(t, v.Progress["s000"].Attempts, "a tenancy that ended well counted as a failed attempt")
	requireNoViolations(t, c.audit)
}

// TestLeaderRenewalReplyLost: one renewal of the leader key whose write
// landed but whose reply was lost. The leader stays leader, and no new
// generation of the plan is published. Before, the next renewal CASed at
// the stale revision, lost, and the leader stepped down without deleting
// its key: nobody led until the key expired, then a new election bumped
// the plan's generation.
func TestLeaderRenewalReplyLost(t *testing.T) {
	c, rl := newLossyCluster(t, 2)
	n := c.start("w1")
	c.until("w1 leads and holds the splits", func() bool { return n.w.IsLeader() && len(n.w.Held()) == 2 })
	c.runFor(ttl)
	v, err := split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	gen := v.Plan.Generation

	rl.arm("leader", 1)
	c.until("the lost reply is injected", func() bool { return rl.fired() == 1 })
	stepped := false
	end := c.clk.Now().Add(3 * ttl)
	c.until("three lease TTLs pass", func() bool {
		if !n.w.IsLeader() {
			stepped = true
		}
		return !c.clk.Now().Before(end)
	})
	require.False(t, stepped, "one lost reply of a leader renewal made the leader step down")
	v, err = split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	require.Equal(t, gen, v.Plan.Generation, "a new election followed")
	requireNoViolations(t, c.audit)
}

// TestLeaderPlanReplyLost: the leader's plan update, rebalancing onto a
// second worker, lands with its reply lost. The leader takes up its own
// plan and stays leader; the splits spread over both workers under the
// same plan generation. Before, the next step saw the plan's newer
// revision, took it for another leader's and stepped down: a new
// election followed.
func TestLeaderPlanReplyLost(t *testing.T) {
	c, rl := newLossyCluster(t, 4)
	n := c.start("w1")
	c.until("w1 leads and holds the splits", func() bool { return n.w.IsLeader() && len(n.w.Held()) == 4 })
	c.runFor(ttl)
	v, err := split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	gen := v.Plan.Generation

	rl.arm("plan", 1)
	n2 := c.start("w2")
	c.until("the lost reply is injected", func() bool { return rl.fired() == 1 })
	stepped := false
	c.until("the splits spread over both workers", func() bool {
		if !n.w.IsLeader() {
			stepped = true
		}
		return len(n.w.Held()) == 2 && len(n2.w.Held()) == 2
	})
	require.False(t, stepped, "the leader stepped down over its own plan")
	v, err = split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	require.Equal(t, gen, v.Plan.Generation, "a new election followed")
	requireNoViolations(t, c.audit)
}
