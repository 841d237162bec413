package split_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/streaming"
)

func workerIDs(n int) []split.WorkerID {
	out := make([]split.WorkerID, n)
	for i := range out {
		out[i] = split.WorkerID(fmt.Sprintf("w%d", i+1))
	}
	return out
}

func TestScenarioBalancedAndHeld(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprintf("%d_workers", n), func(t *testing.T) {
			c := newCluster(t, 20)
			for _, id := range workerIDs(n) {
				c.start(id)
			}
			c.until("a disjoint balanced assignment", c.balanced)
			before := c.holdings()
			lost := losses(c.metrics, workerIDs(n)...)
			c.runFor(10 * ttl)
			require.Equal(t, before, c.holdings(), "a balanced assignment is held: nothing moves")
			require.True(t, c.balanced())
			require.Equal(t, lost, losses(c.metrics, workerIDs(n)...), "no split lost, for any reason, in steady state")
			require.Empty(t, c.app.duplicates(), "no record processed twice")
			requireNoViolations(t, c.audit)
		})
	}
}

func TestScenarioJoinMovesCooperatively(t *testing.T) {
	c := newCluster(t, 30)
	for _, id := range workerIDs(3) {
		c.start(id)
	}
	c.until("three workers balanced", c.balanced)
	c.runFor(2 * ttl) // let records flow and commits land
	before := c.holdings()
	lost := losses(c.metrics, workerIDs(3)...)

	c.start("w4")
	c.until("four workers balanced", func() bool { return len(c.live()) == 4 && c.balanced() })
	after := c.holdings()
	require.Len(t, after["w4"], 7, "the joiner takes its share of 30 over 4")
	for _, id := range workerIDs(3) {
		for _, s := range after[id] {
			require.Contains(t, before[id], s, "only moves to the joiner: %s moved to %s", s, id)
		}
	}
	// Each moved split arrived with the old owner's committed tail: the new
	// tenancy resumed right after the last record the old owner processed.
	c.runFor(ttl)
	for _, s := range after["w4"] {
		resumes := c.app.resumes(s)
		require.GreaterOrEqual(t, len(resumes), 2, "split %s had two tenancies", s)
		tn, ok := c.live()[3].w.Tenancy(s)
		require.True(t, ok)
		require.Equal(t, c.app.lastProcessedExcept(s, "w4"), tn.Resume().Watermark, "%s arrived with the old owner's committed tail", s)
		require.Equal(t, c.audit.Last(s).Owner, split.WorkerID("w4"))
	}
	require.Empty(t, c.app.duplicates(), "a cooperative move replays nothing")
	var graceful float64
	for _, id := range workerIDs(3) {
		graceful += counter(c.metrics, id, split.LossRevoked) - lost[string(id)+"/"+split.LossRevoked]
		require.Equal(t, lost[string(id)+"/"+split.LossForced], counter(c.metrics, id, split.LossForced), "no revocation needed forcing")
	}
	require.Equal(t, float64(7), graceful, "seven graceful revocations")
	for _, cl := range c.audit.Claims() {
		if cl.Owner == "w4" {
			require.Zero(t, cl.Attempts, "a graceful release consumes no attempt (%s)", cl.Split)
		}
	}
	requireNoViolations(t, c.audit)
}

func TestScenarioCrashReclaimedAfterLease(t *testing.T) {
	c := newCluster(t, 12)
	nodes := map[split.WorkerID]*node{}
	for _, id := range workerIDs(3) {
		nodes[id] = c.start(id)
	}
	c.until("balanced", c.balanced)
	c.runFor(2 * ttl)
	victim := nodes["w2"]
	lost := victim.w.Held()
	lastRenew := victim.w.LastRenewal()
	epochs := map[split.SplitID]streaming.Epoch{}
	for _, s := range lost {
		epochs[s] = c.audit.Last(s).Epoch
	}
	c.crash(victim)

	c.until("the crashed worker's splits re-claimed", func() bool { return c.balanced() })
	for _, cl := range c.audit.Claims() {
		if !slices.Contains(lost, cl.Split) || cl.Epoch != epochs[cl.Split]+1 {
			continue
		}
		require.Equal(t, uint32(1), cl.Attempts, "re-claim of %s consumes one attempt", cl.Split)
		require.False(t, cl.At.Before(lastRenew.Add(ttl)), "%s re-claimed at %v, before its lease (renewed %v) expired", cl.Split, cl.At, lastRenew)
		require.NotEqual(t, split.WorkerID("w2"), cl.Owner)
	}
	for _, s := range lost {
		require.Equal(t, epochs[s]+1, c.audit.Last(s).Epoch, "one new tenancy per lost split")
	}
	requireNoViolations(t, c.audit)
}

func TestScenarioPausedWorkerSelfFencesAndLateCommitIsFenced(t *testing.T) {
	c := newCluster(t, 8)
	c.start("w1")
	pclk := vclock.New(c.clk.Now())
	p := c.startWith("w2", pclk)
	c.until("balanced", c.balanced)
	c.runFor(ttl)

	// Pause w2: its clock stops (no timers fire, no renewals) and it makes
	// no calls; its watches also go silent so nothing tells it it lost.
	c.mu.Lock()
	p.paused = true
	c.mu.Unlock()
	p.link.lossy.Store(true)
	p.link.Cut(true)
	stale := map[split.SplitID]*split.Tenancy{}
	for _, s := range p.w.Held() {
		tn, ok := p.w.Tenancy(s)
		require.True(t, ok)
		stale[s] = tn
	}
	require.NotEmpty(t, stale)
	c.until("w1 re-claims the paused worker's splits", func() bool { return len(c.live()[0].w.Held()) == 8 })

	// Wake the process: the link works again but its clock and watches have
	// not caught up, so locally it still believes it owns the splits. Its
	// late commit reaches the store and loses the CAS.
	p.link.Cut(false)
	for s, tn := range stale {
		before := c.audit.Last(s)
		err := tn.Commit(context.Background(), before.Watermark+100, []byte("late"))
		require.ErrorIs(t, err, split.ErrFenced, "late commit of %s", s)
		require.Equal(t, before, c.audit.Last(s), "a fenced commit changes nothing")
	}
	// Now its clock catches up: the self-fence (or the lost lease) drops
	// every stale split.
	p.link.lossy.Store(false)
	pclk.Advance(ttl)
	require.Eventually(t, func() bool {
		for _, tn := range stale {
			select {
			case <-tn.Context().Done():
			default:
				return false
			}
		}
		return true
	}, 30*time.Second, time.Millisecond, "the paused worker's self-fence drops its stale splits")
	c.mu.Lock()
	p.paused = false
	c.mu.Unlock()
	c.until("the paused worker dropped every stale split and the cluster rebalanced", c.balanced)
	for s, tn := range stale {
		select {
		case <-tn.Context().Done():
		default:
			t.Fatalf("stale tenancy of %s still running", s)
		}
	}
	requireNoViolations(t, c.audit)
}

func TestScenarioLiveTwinIsFatal(t *testing.T) {
	c := newCluster(t, 6)
	c.start("w1")
	a := c.start("w2")
	c.until("balanced", c.balanced)
	before := a.w.Held()

	twin := c.start("w2")
	var err error
	c.until("the twin refuses to run", func() bool {
		select {
		case <-twin.done:
			err = twin.err
			return true
		default:
			return false
		}
	})
	require.ErrorIs(t, err, split.ErrDuplicateWorker)
	require.True(t, coordination.IsFatal(err), "a live twin is Fatal: %v", err)
	c.mu.Lock()
	twin.dead = true
	c.mu.Unlock()
	c.runFor(ttl)
	require.Equal(t, before, a.w.Held(), "the incumbent keeps its splits")
	require.True(t, c.balanced())
	requireNoViolations(t, c.audit)
}

func TestScenarioLeaderDiesHealthySplitsStay(t *testing.T) {
	c := newCluster(t, 12)
	for _, id := range workerIDs(3) {
		c.start(id)
	}
	c.until("balanced", c.balanced)
	old := c.leader()
	require.NotNil(t, old)
	v, err := split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	gen := v.Plan.Generation
	before := c.holdings()
	lost := losses(c.metrics, workerIDs(3)...)
	c.crash(old)

	c.until("a new leader rebalanced the dead leader's splits", func() bool {
		l := c.leader()
		return l != nil && l != old && c.balanced()
	})
	v, err = split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	require.Greater(t, v.Plan.Generation, gen, "the new leader bumped the generation")
	require.Equal(t, c.leader().id, v.Plan.Leader)
	for id, held := range before {
		if id == old.id {
			continue
		}
		after := c.holdings()[id]
		for _, s := range held {
			require.Contains(t, after, s, "healthy split %s moved away from %s", s, id)
		}
		for _, r := range lossReasons {
			require.Equal(t, lost[string(id)+"/"+r], counter(c.metrics, id, r), "%s lost a split (%s)", id, r)
		}
	}
	requireNoViolations(t, c.audit)
}

func TestScenarioBrokenAndLossyWatchesReconcile(t *testing.T) {
	c := newCluster(t, 6)
	nodes := map[split.WorkerID]*node{}
	for _, id := range workerIDs(3) {
		nodes[id] = c.start(id)
	}
	c.until("balanced", c.balanced)

	// A real break: every stream ends with a Retryable error; the workers
	// re-watch and carry on.
	c.mem.BreakWatches()
	more := []split.Spec{{ID: "n1", Weight: 1}, {ID: "n2", Weight: 1}, {ID: "n3", Weight: 1}}
	require.NoError(t, split.AddSplits(context.Background(), c.audit, more...))
	c.splits = append(c.splits, more...)
	c.until("new splits assigned after a broken watch", c.balanced)

	// A silent loss: w3's watches drop every event. Only the reconcile
	// listing can tell it about the new splits the leader gives it.
	nodes["w3"].link.lossy.Store(true)
	more = []split.Spec{{ID: "m1", Weight: 1}, {ID: "m2", Weight: 1}, {ID: "m3", Weight: 1}}
	require.NoError(t, split.AddSplits(context.Background(), c.audit, more...))
	c.splits = append(c.splits, more...)
	c.until("balanced while w3's watch is silently lossy", c.balanced)
	require.True(t, nodes["w3"].link.lossy.Load())
	require.Len(t, nodes["w3"].w.Held(), 4)
	requireNoViolations(t, c.audit)
}

func TestScenarioStoreOutageTwoLeases(t *testing.T) {
	c := newCluster(t, 12)
	for _, id := range workerIDs(3) {
		c.start(id)
	}
	c.until("balanced", c.balanced)
	c.runFor(2 * ttl)
	watermarks := map[split.SplitID]uint64{}
	for _, s := range c.splits {
		watermarks[s.ID] = c.audit.Last(s.ID).Watermark
	}

	c.mem.SetAvailable(false)
	c.runFor(2 * ttl)
	for _, n := range c.live() {
		require.Empty(t, n.w.Held(), "%s must self-fence during an outage longer than a lease", n.id)
	}
	c.mem.SetAvailable(true)
	c.until("balanced after the outage", c.balanced)
	c.runFor(2 * ttl)

	v, err := split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	for _, s := range c.splits {
		p := v.Progress[s.ID]
		require.NotEqual(t, split.StatusQuarantined, p.Status, "%s quarantined by an outage", s.ID)
		require.GreaterOrEqual(t, p.Watermark, watermarks[s.ID], "%s watermark regressed", s.ID)
	}
	var fenced float64
	for _, id := range workerIDs(3) {
		fenced += counter(c.metrics, id, split.LossSelfFence)
	}
	require.Equal(t, float64(12), fenced, "every split was self-fenced once")
	requireNoViolations(t, c.audit)
}

func TestScenarioQuarantineAfterFailedTenancies(t *testing.T) {
	c := newCluster(t, 2)
	bad := split.SplitID("s000")
	failing := func(ctx context.Context, tn *split.Tenancy) error {
		if tn.Spec().ID == bad {
			return errors.New("poison record")
		}
		<-ctx.Done()
		return ctx.Err()
	}
	c.start("w1", split.WithHandler(failing), split.WithMaxAttempts(3))
	c.until("the poison split is quarantined", func() bool {
		v, err := split.Inspect(context.Background(), c.mem)
		return err == nil && v.Progress[bad].Status == split.StatusQuarantined
	})
	c.runFor(2 * ttl)
	v, err := split.Inspect(context.Background(), c.mem)
	require.NoError(t, err)
	require.Equal(t, split.StatusQuarantined, v.Progress[bad].Status)
	require.Equal(t, uint32(3), v.Progress[bad].Attempts)
	require.NotContains(t, c.live()[0].w.Held(), bad)
	require.Contains(t, c.live()[0].w.Held(), split.SplitID("s001"), "the healthy split is unaffected")
	require.NotContains(t, v.Plan.Assign, bad, "quarantined splits are not assigned")

	require.NoError(t, split.ResetQuarantine(context.Background(), c.mem, bad))
	c.until("a reset split is claimed again", func() bool {
		return slices.Contains(c.live()[0].w.Held(), bad) || c.audit.Last(bad).Attempts > 0
	})
	requireNoViolations(t, c.audit)
}

func TestScenarioSlowDrainIsForced(t *testing.T) {
	c := newCluster(t, 6)
	var stuck []*split.Tenancy
	var mu sync.Mutex
	stubborn := func(ctx context.Context, tn *split.Tenancy) error {
		mu.Lock()
		stuck = append(stuck, tn)
		mu.Unlock()
		<-ctx.Done() // ignores Revoking: never drains on its own
		return ctx.Err()
	}
	c.start("w1", split.WithHandler(stubborn), split.WithDrainDeadline(ttl))
	c.until("w1 holds everything", c.balanced)
	c.start("w2")
	c.until("balanced after forced revocations", func() bool { return len(c.live()) == 2 && c.balanced() })
	forced := testutil.ToFloat64(c.metrics.Revocations.WithLabelValues("w1", "forced"))
	require.Equal(t, float64(3), forced, "three splits moved, each forced at the drain deadline")
	require.Equal(t, float64(3), counter(c.metrics, "w1", split.LossForced))
	mu.Lock()
	defer mu.Unlock()
	for _, tn := range stuck {
		if slices.Contains(c.live()[1].w.Held(), tn.Spec().ID) {
			select {
			case <-tn.Context().Done():
			default:
				t.Fatalf("forced tenancy of %s still running", tn.Spec().ID)
			}
			require.ErrorIs(t, tn.Commit(context.Background(), 1000, nil), split.ErrFenced)
		}
	}
	for _, cl := range c.audit.Claims() {
		if cl.Owner == "w2" {
			require.Zero(t, cl.Attempts, "a forced release is still a release: no attempt consumed")
		}
	}
	requireNoViolations(t, c.audit)
}

func TestScenarioAbsentAssignmentKeepsHoldingAndForeignPlanFencesLeader(t *testing.T) {
	c := newCluster(t, 6)
	for _, id := range workerIDs(2) {
		c.start(id)
	}
	c.until("balanced", c.balanced)
	leader := c.leader()
	require.NotNil(t, leader)
	lost := losses(c.metrics, workerIDs(2)...)

	// Another writer (a zombie leader of an older generation, an operator)
	// replaces the plan with one that omits s000. The holder keeps s000
	// (absent = keep), and the current leader, seeing a plan revision it
	// did not write, steps down; a new election bumps the generation.
	ctx := context.Background()
	e, err := c.mem.Get(ctx, coordination.Durable, "plan")
	require.NoError(t, err)
	v, err := split.Inspect(ctx, c.mem)
	require.NoError(t, err)
	gen := v.Plan.Generation
	holder := v.Plan.Assign["s000"]
	partial := split.Plan{Generation: gen, Leader: "someone-else", Assign: map[split.SplitID]split.WorkerID{}}
	for s, w := range v.Plan.Assign {
		if s != "s000" {
			partial.Assign[s] = w
		}
	}
	raw, err := json.Marshal(partial)
	require.NoError(t, err)
	o, err := c.mem.Update(ctx, coordination.Durable, "plan", raw, e.Revision)
	require.NoError(t, err)
	require.True(t, o.Won())

	c.until("a re-elected leader republished a full plan", func() bool {
		v, err := split.Inspect(ctx, c.mem)
		return err == nil && v.Plan.Generation > gen && c.balanced()
	})
	for _, n := range c.live() {
		if n.id == holder {
			require.Contains(t, n.w.Held(), split.SplitID("s000"), "the holder kept s000 through the plan that omitted it")
		}
		for _, r := range lossReasons {
			require.Equal(t, lost[string(n.id)+"/"+r], counter(c.metrics, n.id, r), "%s lost a split (%s)", n.id, r)
		}
	}
	requireNoViolations(t, c.audit)
}

// TestInvariantCheckerCatchesDoubleOwnership: the checker the scenarios rely
// on reports a split two workers hold, and not a handoff between its reads.
func TestInvariantCheckerCatchesDoubleOwnership(t *testing.T) {
	ids := []split.WorkerID{"w1", "w2"}
	both := [][]split.SplitID{{"a", "b"}, {"b"}}
	require.Contains(t, doubleOwned(ids, func(i int) []split.SplitID { return both[i] }), "split b owned twice")
	reads := 0
	handoff := func(i int) []split.SplitID { // w1 releases b after the first read of w1
		reads++
		if i == 0 && reads == 1 {
			return []split.SplitID{"a", "b"}
		}
		if i == 0 {
			return []split.SplitID{"a"}
		}
		return []split.SplitID{"b"}
	}
	require.Empty(t, doubleOwned(ids, handoff))
}
