package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// fakeWorkers answers rounds like live workers: every shard checkpoints,
// with per-shard ids 1, 2, ...; outcome overrides that per worker.
type fakeWorkers struct {
	mu      sync.Mutex
	ids     map[streaming.ShardID]uint64
	calls   []roundCall
	outcome func(in activities.RoundInput) (activities.RoundResult, error, bool)
	notices []activities.CoordinatorNotice
}

type roundCall struct {
	queue string
	in    activities.RoundInput
}

func newFakeWorkers() *fakeWorkers { return &fakeWorkers{ids: map[streaming.ShardID]uint64{}} }

func (f *fakeWorkers) round(ctx context.Context, in activities.RoundInput) (activities.RoundResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, roundCall{activity.GetInfo(ctx).TaskQueue, in})
	outcome := f.outcome
	f.mu.Unlock()
	if outcome != nil {
		if res, err, ok := outcome(in); ok {
			return res, err
		}
	}
	return f.ok(in), nil
}

func (f *fakeWorkers) ok(in activities.RoundInput) activities.RoundResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := activities.RoundResult{Round: in.Round, WorkerID: in.WorkerID, Duration: activities.Duration(3 * time.Millisecond)}
	for _, s := range in.Shards {
		f.ids[s.Shard]++
		res.Shards = append(res.Shards, activities.ShardResult{Shard: s.Shard, Epoch: s.Epoch, Status: activities.ShardOK,
			CheckpointID: f.ids[s.Shard], Cursor: string(s.Shard) + "@" + time.Duration(f.ids[s.Shard]).String(), Bytes: 1000})
	}
	return res
}

func (f *fakeWorkers) roundCalls() []roundCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]roundCall(nil), f.calls...)
}

// newRoundsEnv is a test environment with the round activities and the
// coordinator and handoff workflows registered, and nothing mocked.
func newRoundsEnv() *testsuite.TestWorkflowEnvironment {
	env := quietSuite().NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Rounds{})
	env.RegisterWorkflow(workflows.CoordinatorWorkflow)
	env.RegisterWorkflow(workflows.HandoffWorkflow)
	return env
}

func newCoordinatorEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *fakeWorkers) {
	t.Helper()
	env := newRoundsEnv()
	a := &activities.Rounds{}
	f := newFakeWorkers()
	env.OnActivity(a.CheckpointRound, mock.Anything, mock.Anything).Return(f.round)
	env.OnActivity(a.Notice, mock.Anything, mock.Anything).Return(func(_ context.Context, n activities.CoordinatorNotice) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.notices = append(f.notices, n)
		return nil
	})
	return env, f
}

func announcement(worker string, epoch streaming.Epoch, shards ...streaming.ShardID) workflows.Announcement {
	a := workflows.Announcement{WorkerID: worker, TaskQueue: workflows.WorkerTaskQueue(worker)}
	for _, s := range shards {
		a.Shards = append(a.Shards, activities.ShardEpoch{Shard: s, Epoch: epoch})
	}
	return a
}

// update records one update's outcome.
type update struct {
	accepted, rejected, completed bool
	err                           error
	result                        any
	at                            time.Time // virtual time of completion or rejection
}

func sendUpdate(env *testsuite.TestWorkflowEnvironment, name, id string, arg any) *update {
	return sendUpdateTo(env, &update{}, name, id, arg)
}

func sendUpdateTo(env *testsuite.TestWorkflowEnvironment, u *update, name, id string, arg any) *update {
	env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnAccept: func() { u.accepted = true },
		OnReject: func(err error) { u.rejected, u.err, u.at = true, err, env.Now() },
		OnComplete: func(r any, err error) {
			u.completed, u.result, u.err, u.at = true, r, err, env.Now()
		},
	}, arg)
	return u
}

func announceAt(env *testsuite.TestWorkflowEnvironment, d time.Duration, a workflows.Announcement) *update {
	u := &update{}
	env.RegisterDelayedCallback(func() { sendUpdateTo(env, u, workflows.UpdateAnnounce, "", a) }, d)
	return u
}

func stopCoordinatorAfter(env *testsuite.TestWorkflowEnvironment, d time.Duration) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalStop, workflows.StopRequest{Reason: "test"}) }, d)
}

func coordinatorResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.CoordinatorState {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	logPanic(t, env.GetWorkflowError())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.CoordinatorState
	require.NoError(t, env.GetWorkflowResult(&st))
	return st
}

func queryInto(t *testing.T, env *testsuite.TestWorkflowEnvironment, query string, into any, args ...any) {
	t.Helper()
	v, err := env.QueryWorkflow(query, args...)
	require.NoError(t, err)
	require.NoError(t, v.Get(into))
}

func rowOf(t *testing.T, st workflows.CoordinatorState, shard streaming.ShardID) workflows.ShardRow {
	t.Helper()
	for _, r := range st.Table() {
		if r.Shard == shard {
			return r
		}
	}
	t.Fatalf("no row for shard %s in %+v", shard, st.Table())
	return workflows.ShardRow{}
}

var coordIn = workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(10 * time.Second)}

// TestCoordinatorRoundIsOneActivityPerWorker: a round checkpoints every
// announced shard with one activity per worker, on that worker's queue,
// and records every shard's result.
func TestCoordinatorRoundIsOneActivityPerWorker(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	a1 := announceAt(env, 0, announcement("w1", 3, "readings/0", "readings/1", "readings/2"))
	a2 := announceAt(env, 0, announcement("w2", 3, "readings/3", "readings/4"))
	var status workflows.CoordinatorStatus
	var table []workflows.ShardRow
	env.RegisterDelayedCallback(func() {
		queryInto(t, env, workflows.QueryStatus, &status)
		queryInto(t, env, workflows.QueryShards, &table)
	}, 25*time.Second)
	stopCoordinatorAfter(env, 35*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.True(t, a1.completed && a2.completed, "announcements: %+v %+v", a1, a2)

	assert.Equal(t, uint64(3), st.Round, "three 10s intervals in 35s")
	assert.Equal(t, uint64(3), st.Complete)
	calls := f.roundCalls()
	require.Len(t, calls, 6, "one activity per worker per round, whatever the shard count")
	for _, c := range calls {
		assert.Equal(t, workflows.WorkerTaskQueue(c.in.WorkerID), c.queue)
		assert.Equal(t, workflows.BreakerClosed, c.in.Breaker)
		assert.Equal(t, activities.Duration(30*time.Second), c.in.MaxCheckpointAge, "default: 3 intervals")
		if c.in.WorkerID == "w1" {
			assert.Len(t, c.in.Shards, 3)
		} else {
			assert.Len(t, c.in.Shards, 2)
		}
	}
	row := rowOf(t, st, "readings/4")
	assert.Equal(t, workflows.ShardOK, row.Status)
	assert.Equal(t, uint64(3), row.CheckpointID)
	assert.Equal(t, uint64(3), row.Round)
	assert.Equal(t, "w2", row.Owner.WorkerID)
	require.NotNil(t, st.Last)
	assert.Equal(t, "round 3: 2 workers, 5 shards, 5.0 kB, 0s, 0 failed", st.Last.String())

	assert.Equal(t, uint64(2), status.Round)
	assert.Empty(t, status.Shards, "the status query leaves the table to the shards query")
	assert.Len(t, status.Workers, 2)
	assert.False(t, status.NextRoundAt.IsZero())
	assert.Len(t, table, 5)
}

// TestCoordinatorAnnouncementRefusesStaleEpochs: the validator refuses an
// announcement at an epoch below the known owner's (or equal, from another
// worker); a newer one returns the previous owner and starts the handoff,
// whose final checkpoint is a round on the old owner.
func TestCoordinatorAnnouncementRefusesStaleEpochs(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	var handoffs []workflows.HandoffInput
	var ids []string
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var in workflows.HandoffInput
		require.NoError(t, args.Get(&in))
		handoffs = append(handoffs, in)
		ids = append(ids, info.WorkflowExecution.ID)
	})
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone,
		FinalCheckpoint: &activities.CheckpointSummary{CheckpointID: 7}}, nil)

	first := announceAt(env, time.Second, announcement("w1", 3, "readings/0"))
	again := announceAt(env, 2*time.Second, announcement("w1", 3, "readings/0"))
	stale := announceAt(env, 3*time.Second, announcement("w2", 2, "readings/0"))
	conflict := announceAt(env, 4*time.Second, announcement("w2", 3, "readings/0"))
	moved := announceAt(env, 5*time.Second, announcement("w2", 4, "readings/0"))
	stopCoordinatorAfter(env, 25*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)

	require.True(t, first.completed && again.completed)
	assert.Empty(t, again.result.(workflows.AnnounceResult).Previous, "re-announcing is idempotent")
	for name, u := range map[string]*update{"stale": stale, "conflict": conflict} {
		epoch := map[string]streaming.Epoch{"stale": 2, "conflict": 3}[name]
		require.True(t, u.rejected, "%s announcement must be refused by the validator", name)
		var ae *temporal.ApplicationError
		require.ErrorAs(t, u.err, &ae)
		assert.Equal(t, workflows.ErrTypeStaleEpoch, ae.Type(), name)
		assert.Contains(t, u.err.Error(), `worker "w1" owns it at epoch 3`)
		// The stale shards are named, so the worker announces the rest
		// again in one announcement.
		var stale []activities.ShardEpoch
		require.NoError(t, ae.Details(&stale), name)
		assert.Equal(t, []activities.ShardEpoch{{Shard: "readings/0", Epoch: epoch}}, stale, name)
	}
	require.True(t, moved.completed)
	require.NoError(t, moved.err)
	res := moved.result.(workflows.AnnounceResult)
	require.Len(t, res.Previous, 1)
	assert.Equal(t, workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 3}, res.Previous[0].Owner)
	assert.Equal(t, workflows.HandoffWorkflowIDAt("iot", "readings/0", 4), res.Previous[0].Handoff)

	require.Len(t, handoffs, 1, "one handoff for the one move")
	assert.Equal(t, res.Previous[0].Handoff, ids[0])
	assert.True(t, handoffs[0].FinalRound)
	assert.False(t, handoffs[0].FromDead)
	assert.Equal(t, streaming.Epoch(3), handoffs[0].From.Epoch)
	assert.Equal(t, "w2", handoffs[0].To.WorkerID)

	row := rowOf(t, st, "readings/0")
	assert.Equal(t, "w2", row.Owner.WorkerID)
	assert.Contains(t, row.Handoff, "final checkpoint 7")
}

// slowRoundsEnv is newRoundsEnv with every round activity answered by
// f after d of (virtual) time.
func slowRoundsEnv(d time.Duration) (*testsuite.TestWorkflowEnvironment, *fakeWorkers) {
	env := newRoundsEnv()
	f := newFakeWorkers()
	a := &activities.Rounds{}
	env.OnActivity(a.CheckpointRound, mock.Anything, mock.Anything).After(d).Return(f.round)
	return env, f
}

// TestCoordinatorStopWhileRoundInFlight: the per-shard workflow read a
// stop only between checkpoints (a stop sent at +5s was handled at
// checkpoint 50); the coordinator handles it while a round runs.
func TestCoordinatorStopWhileRoundInFlight(t *testing.T) {
	env, _ := slowRoundsEnv(10 * time.Minute)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	var inFlight workflows.CoordinatorStatus
	env.RegisterDelayedCallback(func() {
		queryInto(t, env, workflows.QueryStatus, &inFlight)
		env.SignalWorkflow(workflows.SignalStop, workflows.StopRequest{Reason: "operator"})
	}, 15*time.Second)
	start := env.Now()
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.NotNil(t, inFlight.InFlight, "the stop was sent while round 1 ran")
	assert.Equal(t, uint64(1), inFlight.InFlight.Round)
	assert.Less(t, env.Now().Sub(start), time.Minute, "the stop did not wait for the 10-minute round")
	assert.Equal(t, uint64(1), st.Round)
}

// TestCoordinatorCheckpointNowWhileRoundInFlight: a checkpoint-now
// request during a round is served by the next round (one that starts
// after the request), and returns that round's summary.
func TestCoordinatorCheckpointNowWhileRoundInFlight(t *testing.T) {
	env, _ := slowRoundsEnv(30 * time.Second)
	announceAt(env, 0, announcement("w1", 1, "readings/0", "readings/1"))
	var first, now *update
	env.RegisterDelayedCallback(func() {
		first = sendUpdate(env, workflows.UpdateCheckpointNow, "now-1", workflows.CheckpointNowRequest{Reason: "first"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		now = sendUpdate(env, workflows.UpdateCheckpointNow, "now-2", workflows.CheckpointNowRequest{Reason: "operator"})
	}, 15*time.Second)
	stopCoordinatorAfter(env, 2*time.Minute)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(time.Hour)})
	coordinatorResult(t, env)
	require.True(t, first.completed)
	assert.Equal(t, uint64(1), first.result.(workflows.RoundSummary).Round)
	require.NotNil(t, now)
	require.True(t, now.accepted, "accepted while round 1 ran")
	require.True(t, now.completed)
	require.NoError(t, now.err)
	sum := now.result.(workflows.RoundSummary)
	assert.Equal(t, uint64(2), sum.Round, "round 1 started before the request")
	assert.Equal(t, "checkpoint now: operator", sum.Reason)
	assert.Equal(t, 2, sum.OK)
	assert.Equal(t, activities.Duration(30*time.Second), sum.Duration)
}

// TestCoordinatorAnnouncementWhileRoundInFlight: an announcement during a
// round completes at once (not after the round), and the next round
// includes the new shard; a share whose shards all moved away is not
// waited for.
func TestCoordinatorAnnouncementWhileRoundInFlight(t *testing.T) {
	env, f := slowRoundsEnv(2 * time.Minute)
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	var during, takeover *update
	env.RegisterDelayedCallback(func() {
		during = sendUpdate(env, workflows.UpdateAnnounce, "", announcement("w2", 1, "readings/5"))
	}, 20*time.Second)
	// w1's only shard moves to w2 while w1's share of round 1 runs.
	env.RegisterDelayedCallback(func() {
		takeover = sendUpdate(env, workflows.UpdateAnnounce, "", announcement("w2", 2, "readings/0"))
	}, 30*time.Second)
	stopCoordinatorAfter(env, 4*time.Minute)
	start := env.Now()
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.True(t, during.completed)
	assert.Less(t, during.at.Sub(start), time.Minute, "the announcement did not wait for the 2-minute round")
	require.True(t, takeover.completed)
	assert.Len(t, takeover.result.(workflows.AnnounceResult).Previous, 1)

	calls := f.roundCalls()
	require.GreaterOrEqual(t, len(calls), 2)
	assert.Equal(t, "w1", calls[0].in.WorkerID)
	assert.Equal(t, uint64(1), calls[0].in.Round)
	// Round 2 is w2's, with both shards, and starts at +30s: round 1 did
	// not wait for w1's 2-minute share once its shard had moved.
	assert.Equal(t, "w2", calls[1].in.WorkerID)
	assert.Equal(t, uint64(2), calls[1].in.Round)
	assert.Len(t, calls[1].in.Shards, 2)
	row := rowOf(t, st, "readings/0")
	assert.Equal(t, "w2", row.Owner.WorkerID)
	assert.Equal(t, workflows.ShardOK, row.Status)
	assert.Equal(t, uint64(2), row.Round, "round 2 recorded it; w1's share of round 1 was dropped")
	// Round 1 ended at +30s, round 2 ran to 2:30, round 3 was in flight at
	// the stop; had round 1 waited for w1's share (to 2:10), round 2
	// would have been cut at 4:00.
	assert.Equal(t, uint64(3), st.Round)
}

func timeout(tt enumspb.TimeoutType) error {
	return temporal.NewTimeoutError(tt, errors.New("no poller"))
}

// TestCoordinatorBreakerCountsStorageFailuresOnly: a dead owner's
// schedule-to-start timeouts opened the per-shard workflow's breaker for
// minutes while storage was healthy. The coordinator's one breaker counts
// rounds with storage failures only; an unreachable worker never opens it.
func TestCoordinatorBreakerCountsStorageFailuresOnly(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	var mode string
	var mu sync.Mutex
	setMode := func(m string) { mu.Lock(); mode = m; mu.Unlock() }
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		switch mode {
		case "unreachable":
			if in.Round%2 == 0 {
				return activities.RoundResult{}, errors.New("worker is closing"), true
			}
			return activities.RoundResult{}, timeout(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START), true
		case "storage":
			res := f.ok(in)
			res.Shards[0].Status, res.Shards[0].Error = activities.ShardFailed, "put readings/0: 503 slow down"
			return res, nil, true
		}
		return activities.RoundResult{}, nil, false
	}
	var upserts []string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if v, ok := sa.GetKeyword(workflows.SearchBreakerState); ok {
			upserts = append(upserts, v)
		}
	}).Return(nil)
	announceAt(env, 0, announcement("w1", 1, "readings/0", "readings/1"))
	var afterUnreachable, whileOpen workflows.CoordinatorStatus
	query := func(into *workflows.CoordinatorStatus) func() {
		return func() { queryInto(t, env, workflows.QueryStatus, into) }
	}
	env.RegisterDelayedCallback(func() { setMode("unreachable") }, 5*time.Second)
	env.RegisterDelayedCallback(query(&afterUnreachable), 65*time.Second) // six unreachable rounds
	env.RegisterDelayedCallback(func() { setMode("storage") }, 66*time.Second)
	env.RegisterDelayedCallback(query(&whileOpen), 100*time.Second) // three failed rounds: open
	env.RegisterDelayedCallback(func() { setMode("") }, 101*time.Second)
	stopCoordinatorAfter(env, 200*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(10 * time.Second),
		BreakerThreshold: 3, BreakerCoolDown: activities.Duration(time.Minute)})
	st := coordinatorResult(t, env)

	assert.Equal(t, workflows.BreakerClosed, afterUnreachable.Breaker, "an unreachable or failing worker is not a storage failure")
	assert.Zero(t, afterUnreachable.ConsecutiveFailures)
	assert.Equal(t, uint64(6), afterUnreachable.Partial)
	assert.Equal(t, workflows.BreakerOpen, whileOpen.Breaker)
	assert.Equal(t, 3, whileOpen.ConsecutiveFailures)
	assert.Contains(t, whileOpen.LastError, "503 slow down")
	f.mu.Lock()
	require.Len(t, f.notices, 1, "workers are told once when the breaker opens")
	assert.Equal(t, workflows.BreakerOpen, f.notices[0].Breaker)
	f.mu.Unlock()

	// Open for the cool-down (no rounds), one half-open probe, closed.
	var probe *roundCall
	calls := f.roundCalls()
	for i := range calls {
		if calls[i].in.Breaker == workflows.BreakerHalfOpen {
			probe = &calls[i]
			break
		}
	}
	require.NotNil(t, probe, "a half-open probe round ran")
	assert.Equal(t, workflows.BreakerClosed, st.Breaker)
	assert.Equal(t, uint64(3), st.Failed)
	assert.Equal(t, []string{"closed", "open", "half-open", "closed"}, upserts, "the breaker search attribute is upserted on change only")
	assert.Equal(t, workflows.ShardOK, rowOf(t, st, "readings/0").Status)
}

// TestCoordinatorWorkerGone: the lease says a worker died; it leaves the
// rounds at once (its share in flight is not waited for), its shards wait
// for their next owner, whose announcement names the dead owner and starts
// a handoff that skips the final checkpoint; the next round includes them.
func TestCoordinatorWorkerGone(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	var handoffs []workflows.HandoffInput
	env.SetOnChildWorkflowStartedListener(func(_ *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var in workflows.HandoffInput
		require.NoError(t, args.Get(&in))
		handoffs = append(handoffs, in)
	})
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		if in.WorkerID == "w1" && in.Round >= 2 {
			return activities.RoundResult{}, timeout(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START), true
		}
		return activities.RoundResult{}, nil, false
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0", "readings/1"))
	announceAt(env, 0, announcement("w2", 1, "readings/2"))
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalWorkerGone, workflows.WorkerGone{WorkerID: "w1", Reason: "heartbeat timed out"})
	}, 25*time.Second)
	var gone workflows.CoordinatorStatus
	var goneTable []workflows.ShardRow
	env.RegisterDelayedCallback(func() {
		queryInto(t, env, workflows.QueryStatus, &gone)
		queryInto(t, env, workflows.QueryShards, &goneTable)
	}, 26*time.Second)
	takeover := announceAt(env, 33*time.Second, announcement("w2", 2, "readings/0", "readings/1"))
	stopCoordinatorAfter(env, 55*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)

	for _, w := range gone.Workers {
		if w.WorkerID == "w1" {
			assert.Equal(t, workflows.WorkerGoneStatus, w.Status)
		}
	}
	for _, r := range goneTable {
		if r.Owner.WorkerID == "w1" {
			assert.Equal(t, workflows.ShardOwnerGone, r.Status)
		}
	}
	require.True(t, takeover.completed)
	prev := takeover.result.(workflows.AnnounceResult).Previous
	require.Len(t, prev, 2)
	assert.True(t, prev[0].Gone)
	require.Len(t, handoffs, 2)
	assert.True(t, handoffs[0].FromDead, "the dead owner's final checkpoint is skipped")

	// Rounds 3 (at 30s) ran on w2 only; round 4 (40s) and 5 (50s) on w2 with all three shards.
	for _, c := range f.roundCalls() {
		if c.in.Round >= 3 {
			assert.Equal(t, "w2", c.in.WorkerID, "round %d", c.in.Round)
		}
		if c.in.Round >= 4 {
			assert.Len(t, c.in.Shards, 3, "round %d", c.in.Round)
		}
	}
	for _, s := range []streaming.ShardID{"readings/0", "readings/1", "readings/2"} {
		row := rowOf(t, st, s)
		assert.Equal(t, workflows.ShardOK, row.Status, s)
		assert.Equal(t, "w2", row.Owner.WorkerID, s)
	}
}

// TestCoordinatorIgnoresAWorkerGoneNoticeOfAnEarlierRun: a worker's process
// died and another took its worker id, announcing the same shards at the
// same epoch before the old process's lease workflow timed out; that
// lease's notice, arriving after, names the old run and is ignored: the
// new run stays in the rounds with its shards. A notice naming the run
// that announced is applied. Before, the stale notice took the live
// worker and its shards out of the rounds (until it announced them again
// after max_checkpoint_age, or a next owner took them over as from a dead
// one, skipping their final checkpoint).
func TestCoordinatorIgnoresAWorkerGoneNoticeOfAnEarlierRun(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	a := announcement("w1", 1, "readings/0", "readings/1")
	a.Instance = "run-2"
	announceAt(env, 0, a)
	gone := func(instance string) func() {
		return func() {
			env.SignalWorkflow(workflows.SignalWorkerGone, workflows.WorkerGone{WorkerID: "w1", Instance: instance, Reason: "heartbeat timed out",
				Shards: []activities.ShardEpoch{{Shard: "readings/0", Epoch: 1}, {Shard: "readings/1", Epoch: 1}}})
		}
	}
	env.RegisterDelayedCallback(gone("run-1"), 15*time.Second)
	var afterStale workflows.CoordinatorStatus
	var staleTable []workflows.ShardRow
	env.RegisterDelayedCallback(func() {
		queryInto(t, env, workflows.QueryStatus, &afterStale)
		queryInto(t, env, workflows.QueryShards, &staleTable)
	}, 16*time.Second)
	env.RegisterDelayedCallback(gone("run-2"), 35*time.Second)
	stopCoordinatorAfter(env, 45*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)

	require.Len(t, afterStale.Workers, 1)
	assert.Equal(t, workflows.WorkerLive, afterStale.Workers[0].Status, "a notice about the worker's earlier run")
	assert.Equal(t, "run-2", afterStale.Workers[0].Instance)
	for _, r := range staleTable {
		assert.Equal(t, workflows.ShardOK, r.Status, r.Shard)
	}
	// Rounds 1 (10s), 2 (20s) and 3 (30s) ran on w1 with both shards; none after the notice about its run.
	var rounds []uint64
	for _, c := range f.roundCalls() {
		assert.Len(t, c.in.Shards, 2, "round %d", c.in.Round)
		rounds = append(rounds, c.in.Round)
	}
	assert.Equal(t, []uint64{1, 2, 3}, rounds)
	require.Len(t, st.Workers, 1)
	assert.Equal(t, workflows.WorkerGoneStatus, st.Workers[0].Status, "the notice about the run that announced")
	assert.Equal(t, workflows.ShardOwnerGone, rowOf(t, st, "readings/0").Status)
}

// TestCoordinatorReconcilesLocalCheckpoints: a round after an outage
// accounts for the checkpoints workers took on their own.
func TestCoordinatorReconcilesLocalCheckpoints(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		res := f.ok(in)
		if in.Round == 2 {
			for i := range res.Shards {
				res.Shards[i].Local = 4
				res.Shards[i].CheckpointID += 4
			}
		}
		return res, nil, true
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0", "readings/1"))
	stopCoordinatorAfter(env, 25*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	assert.Equal(t, int64(8), st.LocalCheckpoints)
	assert.Equal(t, int64(4), rowOf(t, st, "readings/1").Local)
	assert.Equal(t, uint64(6), rowOf(t, st, "readings/1").CheckpointID)
	assert.Contains(t, st.Last.String(), "8 local checkpoints reconciled")
}

// TestCoordinatorContinuesAsNewWithItsState: after ContinueAsNewAfter
// rounds the coordinator continues as new, upgrading on the way, with its
// owners, table and counters.
func TestCoordinatorContinuesAsNewWithItsState(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(10 * time.Second), ContinueAsNewAfter: 2})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	var next workflows.CoordinatorInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	assert.Equal(t, uint64(2), next.State.Round)
	assert.EqualValues(t, workflow.ContinueAsNewVersioningBehaviorAutoUpgrade, can.InitialVersioningBehavior)
	// A table this small travels whole, as earlier builds read it (they
	// know no folded table): a rollback to one keeps the owners.
	require.Len(t, next.State.Shards, 1)
	assert.Empty(t, next.State.Groups)
	assert.Equal(t, "w1", next.State.Shards[0].Owner.WorkerID)
	assert.Equal(t, uint64(2), next.State.Shards[0].CheckpointID)
	assert.NotEmpty(t, next.State.Shards[0].Cursor, "a whole row keeps its cursor")
	assert.Equal(t, workflows.BreakerClosed, next.State.SearchBreaker)

	// The next run goes on from there.
	env2, f2 := newCoordinatorEnv(t)
	stopCoordinatorAfter(env2, 15*time.Second)
	env2.ExecuteWorkflow(workflows.CoordinatorWorkflow, next)
	st := coordinatorResult(t, env2)
	assert.Equal(t, uint64(3), st.Round)
	assert.Equal(t, 1, st.Generation)
	require.Len(t, f2.roundCalls(), 1)
	assert.Equal(t, uint64(3), f2.roundCalls()[0].in.Round)
}

func TestCoordinatorCheckpointNowWithoutShards(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	var now *update
	env.RegisterDelayedCallback(func() {
		now = sendUpdate(env, workflows.UpdateCheckpointNow, "", workflows.CheckpointNowRequest{})
	}, time.Second)
	stopCoordinatorAfter(env, time.Minute)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	coordinatorResult(t, env)
	require.True(t, now.completed)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, now.err, &ae)
	assert.Equal(t, workflows.ErrTypeNoShards, ae.Type())
}

func TestCoordinatorInputValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   workflows.CoordinatorInput
		want string
	}{
		{"no pipeline", workflows.CoordinatorInput{}, "pipeline is empty"},
		{"negative interval", workflows.CoordinatorInput{Pipeline: "p", Interval: -1}, "must not be negative"},
		{"negative threshold", workflows.CoordinatorInput{Pipeline: "p", BreakerThreshold: -1}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, tc.in.Validate(), tc.want)
		})
	}
	d := workflows.CoordinatorInput{Pipeline: "p", Interval: activities.Duration(200 * time.Millisecond)}.WithDefaults()
	assert.Equal(t, time.Second, d.ReachTimeout.D(), "reach timeout: the interval, at least 1s")
	assert.Equal(t, 600*time.Millisecond, d.MaxCheckpointAge.D())
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 3_200_000: "3.2 MB", 1_500: "1.5 kB", 7_000_000_000: "7.0 GB",
		999_999: "1.0 MB", 999_949: "999.9 kB", 999_950_000: "1.0 GB"} { // 999,999 read "1000.0 kB"
		assert.Equal(t, want, workflows.HumanBytes(n))
	}
}

// TestCoordinatorMovesToANewVersionAtTheNextRound: when the control
// workers' current version changes (a rollout), the pinned coordinator
// continues as new after its round, asking to upgrade, instead of holding
// the old version for a whole run.
func TestCoordinatorMovesToANewVersionAtTheNextRound(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	env.RegisterDelayedCallback(func() { env.SetTargetWorkerDeploymentVersionChanged(true) }, 25*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	assert.EqualValues(t, workflow.ContinueAsNewVersioningBehaviorAutoUpgrade, can.InitialVersioningBehavior)
	var next workflows.CoordinatorInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, uint64(3), next.State.Round, "the round after the change (at 30s) was the last of the run")
}

// TestCoordinatorStopDoesNotCountShardsAsMoved: a stop cuts the round in
// flight short; its unfinished shards did not change owner. Before, they
// were counted as Moved, and the last round read "1 moved (cut short by
// stop)" for a shard that never moved.
func TestCoordinatorStopDoesNotCountShardsAsMoved(t *testing.T) {
	env, _ := slowRoundsEnv(10 * time.Minute)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	stopCoordinatorAfter(env, 15*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.NotNil(t, st.Last)
	assert.True(t, st.Last.Cut)
	assert.Zero(t, st.Last.Moved, "no shard moved: the stop cut the round short")
	assert.Equal(t, "round 1: 1 workers, 1 shards, 0 B, 5s, 0 failed (cut short by stop)", st.Last.String())
}

// TestCoordinatorRefusesAShardWithoutAName: the refusal of an
// announcement naming a shard without a name says which pipeline's
// coordinator refused it (a worker may serve several). Before, it named
// the worker only.
func TestCoordinatorRefusesAShardWithoutAName(t *testing.T) {
	env, _ := newCoordinatorEnv(t)
	bad := announceAt(env, 0, announcement("w1", 1, "readings/0", ""))
	stopCoordinatorAfter(env, time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	coordinatorResult(t, env)
	require.True(t, bad.rejected)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, bad.err, &ae)
	assert.Equal(t, activities.ErrTypeBadInput, ae.Type())
	assert.Contains(t, bad.err.Error(), `announcement of worker "w1" to the coordinator of iot names a shard without a name`)
}

// TestCoordinatorWorkerGoneMidRoundIsNotCountedAsMoved: a worker its
// lease declares gone while its share of a round runs leaves the round;
// its shards did not change owner (they wait for their next one), so the
// round counts them unreachable. Before, they were counted as Moved and
// the round read "1 moved" for a shard nobody had taken.
func TestCoordinatorWorkerGoneMidRoundIsNotCountedAsMoved(t *testing.T) {
	env, _ := slowRoundsEnv(10 * time.Minute)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalWorkerGone, workflows.WorkerGone{WorkerID: "w1", Reason: "heartbeat timed out"})
	}, 15*time.Second)
	stopCoordinatorAfter(env, 18*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.NotNil(t, st.Last)
	assert.Zero(t, st.Last.Moved, "no shard moved: its owner was declared gone")
	assert.Equal(t, 1, st.Last.Unreachable)
	assert.Equal(t, "round 1: 1 workers, 1 shards, 0 B, 5s, 0 failed, 1 unreachable", st.Last.String())
}

// TestCoordinatorTimedOutShareCountsItsMovedShardsAsMoved: a worker's
// share of a round times out after one of its two shards moved to another
// worker mid-round. The shard still its own failed; the one that moved is
// counted Moved, as the summary's fields say. Before, both were counted
// failed: the round read "2 failed" for one storage failure.
func TestCoordinatorTimedOutShareCountsItsMovedShardsAsMoved(t *testing.T) {
	env, f := slowRoundsEnv(time.Minute)
	env.OnWorkflow(workflows.HandoffWorkflow, mock.Anything, mock.Anything).Return(workflows.HandoffState{Step: workflows.StepDone}, nil)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		return activities.RoundResult{}, timeout(enumspb.TIMEOUT_TYPE_START_TO_CLOSE), true
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0", "readings/1"))
	// Round 1 starts at 10s; at 15s w2 takes readings/0 over, w1's share
	// still runs for readings/1 and times out at 70s.
	moved := announceAt(env, 15*time.Second, announcement("w2", 2, "readings/0"))
	var after workflows.CoordinatorStatus
	env.RegisterDelayedCallback(func() { queryInto(t, env, workflows.QueryStatus, &after) }, 71*time.Second)
	stopCoordinatorAfter(env, 75*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.True(t, moved.completed && moved.err == nil, "announcement: %+v", moved)
	require.NotNil(t, after.Last)
	assert.Equal(t, uint64(1), after.Last.Round)
	assert.Equal(t, 1, after.Last.Failed, "only readings/1 failed on its owner")
	assert.Equal(t, 1, after.Last.Moved, "readings/0 moved while the round ran")
	assert.Equal(t, "round 1: 1 workers, 2 shards, 0 B, 1m0s, 1 failed, 1 moved", after.Last.String())
	assert.Equal(t, workflows.ShardFailed, rowOf(t, st, "readings/1").Status)
	assert.Equal(t, workflows.ShardNew, rowOf(t, st, "readings/0").Status, "the new owner's row is not the timed-out share's")
}

// TestCoordinatorShareDoneBeforeItsWorkerIsGoneIsRecorded: a worker's
// share of a round completes and, in the same workflow task, its lease
// says it is gone. The shards committed: the round counts them and their
// rows keep the checkpoint (still waiting for their next owner). Before,
// the notice was handled first and the finished share was discarded as
// if cut short: the round read "1 unreachable" and the table lost the
// checkpoint.
func TestCoordinatorShareDoneBeforeItsWorkerIsGoneIsRecorded(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		if in.Round == 1 {
			// Queued without a workflow task: the share's result (returned
			// next) wakes the workflow with both.
			env.SignalWorkflowSkippingWorkflowTask(workflows.SignalWorkerGone, workflows.WorkerGone{WorkerID: "w1", Reason: "heartbeat timed out"})
		}
		return activities.RoundResult{}, nil, false
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	stopCoordinatorAfter(env, 15*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.NotNil(t, st.Last)
	assert.Equal(t, uint64(1), st.Last.Round)
	assert.Equal(t, 1, st.Last.OK, "the share finished before its worker was declared gone")
	assert.Zero(t, st.Last.Unreachable)
	row := rowOf(t, st, "readings/0")
	assert.Equal(t, workflows.ShardOwnerGone, row.Status, "the shard waits for its next owner")
	assert.Equal(t, uint64(1), row.CheckpointID)
	assert.Equal(t, uint64(1), row.Round)
}

// TestCoordinatorShareDoneBeforeTheStopIsRecorded: the last share of a
// round completes in the workflow task that brings a stop. Its shards
// committed: the final state records them and the round was not cut
// short. Before, the finished share was discarded and the round read
// "cut short by stop".
func TestCoordinatorShareDoneBeforeTheStopIsRecorded(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		env.SignalWorkflowSkippingWorkflowTask(workflows.SignalStop, workflows.StopRequest{Reason: "test"})
		return activities.RoundResult{}, nil, false
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.NotNil(t, st.Last)
	assert.Equal(t, "round 1: 1 workers, 1 shards, 1.0 kB, 0s, 0 failed", st.Last.String())
	assert.Equal(t, uint64(1), st.Complete)
	row := rowOf(t, st, "readings/0")
	assert.Equal(t, workflows.ShardOK, row.Status)
	assert.Equal(t, uint64(1), row.CheckpointID)
}

// TestCoordinatorDetailsFollowTheBreakerAfterItsCoolDown: the breaker's
// cool-down ends while no live worker has a shard (its only worker is
// gone), so no probe round runs. The breaker is half-open, and the
// current details (the web UI) say so. Before, they still read "breaker
// open ..., rounds resume at" a time long past.
func TestCoordinatorDetailsFollowTheBreakerAfterItsCoolDown(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		res := f.ok(in)
		res.Shards[0].Status, res.Shards[0].Error = activities.ShardFailed, "put readings/0: 503 slow down"
		return res, nil, true
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalWorkerGone, workflows.WorkerGone{WorkerID: "w1", Reason: "heartbeat timed out"})
	}, 15*time.Second)
	var status workflows.CoordinatorStatus
	var details string
	env.RegisterDelayedCallback(func() {
		queryInto(t, env, workflows.QueryStatus, &status)
		v, err := env.QueryWorkflow("__temporal_workflow_metadata")
		require.NoError(t, err)
		var md sdkpb.WorkflowMetadata
		require.NoError(t, v.Get(&md))
		details = md.GetCurrentDetails()
	}, 2*time.Minute)
	stopCoordinatorAfter(env, 3*time.Minute)
	in := coordIn
	in.BreakerThreshold = 1
	in.BreakerCoolDown = activities.Duration(time.Minute)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	coordinatorResult(t, env)
	require.Equal(t, workflows.BreakerHalfOpen, status.Breaker)
	assert.Contains(t, details, "breaker half-open")
	assert.NotContains(t, details, "breaker open")
}

// TestCoordinatorProbeAskedForDuringTheCoolDownIsSearchable: checkpoint
// now during an open breaker's cool-down runs the half-open probe round;
// the breaker search attribute says half-open while it runs. Before, it
// still read "open" (the probe was never upserted), so `starter
// checkpoint list` showed an open breaker while a round ran.
func TestCoordinatorProbeAskedForDuringTheCoolDownIsSearchable(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	fail := true
	var mu sync.Mutex
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if !fail {
			return activities.RoundResult{}, nil, false
		}
		res := f.ok(in)
		res.Shards[0].Status, res.Shards[0].Error = activities.ShardFailed, "put readings/0: 503 slow down"
		return res, nil, true
	}
	var upserts []string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		if v, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(workflows.SearchBreakerState); ok {
			upserts = append(upserts, v)
		}
	}).Return(nil)
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	var now *update
	env.RegisterDelayedCallback(func() {
		mu.Lock()
		fail = false
		mu.Unlock()
		now = sendUpdate(env, workflows.UpdateCheckpointNow, "now", workflows.CheckpointNowRequest{Reason: "probe"})
	}, 20*time.Second)
	stopCoordinatorAfter(env, 30*time.Second)
	in := coordIn
	in.BreakerThreshold = 1
	in.BreakerCoolDown = activities.Duration(time.Hour)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	st := coordinatorResult(t, env)
	require.NotNil(t, now)
	require.True(t, now.completed)
	require.NoError(t, now.err)
	assert.Equal(t, workflows.BreakerClosed, st.Breaker)
	assert.Equal(t, []string{"closed", "open", "half-open", "closed"}, upserts)
}

// TestCoordinatorWorkerThatTookItsShareIsReachable: a worker misses round
// 1 (schedule-to-start), then takes its share of round 2 and fails it (it
// is closing). It was reached: its row says live, with no unreachable
// streak. Before, it stayed "unreachable" (streak 1) and the details
// counted it among the unreachable workers.
func TestCoordinatorWorkerThatTookItsShareIsReachable(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		if in.Round == 1 {
			return activities.RoundResult{}, timeout(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START), true
		}
		return activities.RoundResult{}, errors.New("worker is closing"), true
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	var after1, after2 workflows.CoordinatorStatus
	env.RegisterDelayedCallback(func() { queryInto(t, env, workflows.QueryStatus, &after1) }, 15*time.Second)
	env.RegisterDelayedCallback(func() { queryInto(t, env, workflows.QueryStatus, &after2) }, 25*time.Second)
	stopCoordinatorAfter(env, 28*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	coordinatorResult(t, env)
	require.Len(t, after1.Workers, 1)
	assert.Equal(t, workflows.WorkerUnreachable, after1.Workers[0].Status)
	require.Len(t, after2.Workers, 1)
	assert.Equal(t, uint64(2), after2.Last.Round)
	assert.Equal(t, 1, after2.Last.WorkerErrors)
	assert.Equal(t, workflows.WorkerLive, after2.Workers[0].Status, "the worker took its share of round 2")
	assert.Zero(t, after2.Workers[0].Unreachable)
}

// TestCoordinatorShareFailedAsItsWorkerIsGoneKeepsTheShardsWaiting: a
// worker's share fails in the workflow task that says the worker is gone.
// Its shards still wait for their next owner (a handoff from a dead owner
// skips the final checkpoint) and the round counts them unreachable.
func TestCoordinatorShareFailedAsItsWorkerIsGoneKeepsTheShardsWaiting(t *testing.T) {
	env, f := newCoordinatorEnv(t)
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		env.SignalWorkflowSkippingWorkflowTask(workflows.SignalWorkerGone, workflows.WorkerGone{WorkerID: "w1", Reason: "heartbeat timed out"})
		return activities.RoundResult{}, errors.New("worker is closing"), true
	}
	announceAt(env, 0, announcement("w1", 1, "readings/0"))
	stopCoordinatorAfter(env, 15*time.Second)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, coordIn)
	st := coordinatorResult(t, env)
	require.NotNil(t, st.Last)
	assert.Equal(t, 1, st.Last.Unreachable)
	assert.Zero(t, st.Last.WorkerErrors)
	assert.Equal(t, workflows.ShardOwnerGone, rowOf(t, st, "readings/0").Status)
}
