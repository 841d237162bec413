package pipeline_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

func newCoordStore(t testing.TB, ttl time.Duration) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithLeaseTTL(ttl))
	require.NoError(t, err)
	return s
}

// presence reads the worker's presence lease from the store.
func presence(t testing.TB, s coordination.Store, id string) (coordination.Entry, bool) {
	t.Helper()
	e, err := s.Get(context.Background(), coordination.Ephemeral, "worker."+id)
	if err != nil {
		return coordination.Entry{}, false
	}
	return e, true
}

// startRaw starts a worker whose Run result the test reads itself.
func startRaw(t testing.TB, p pipeline.Pipeline, opts ...pipeline.Option) (*pipeline.Worker, context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := pipeline.NewWorker(ctx, p, append([]pipeline.Option{pipeline.WithLogger(testLogger(t))}, opts...)...)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-w.Done() })
	return w, cancel, done
}

// TestCoordinationRefusesTwin: a worker registers its id in the
// coordination store; a second live process with the same id is refused
// with an error that names the id, and the first keeps running. After a
// graceful stop the presence is withdrawn, so the id is free at once.
func TestCoordinationRefusesTwin(t *testing.T) {
	c := newCluster(t, 2)
	store := newCoordStore(t, time.Second)
	p := alarmPipeline(c.ListenAddrs(), t.TempDir())
	first := start(t, p, pipeline.WithWorkerID("c1"), pipeline.WithCoordination(store))
	require.Eventually(t, func() bool { return pipeline.Registered(first.w) }, 30*time.Second, 10*time.Millisecond)
	_, ok := presence(t, store, "c1")
	require.True(t, ok, "no presence lease for c1")

	_, _, done := startRaw(t, alarmPipeline(c.ListenAddrs(), t.TempDir()), pipeline.WithWorkerID("c1"), pipeline.WithCoordination(store))
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the twin was not refused")
	}
	require.ErrorIs(t, err, split.ErrDuplicateWorker)
	require.ErrorContains(t, err, `worker "c1"`)
	require.NoError(t, first.w.Err(), "the incumbent keeps its lease")

	first.stop(t)
	_, ok = presence(t, store, "c1")
	require.False(t, ok, "a graceful stop withdraws the presence lease")
	again := start(t, alarmPipeline(c.ListenAddrs(), t.TempDir()), pipeline.WithWorkerID("c1"), pipeline.WithCoordination(store))
	require.Eventually(t, func() bool { return pipeline.Registered(again.w) }, 30*time.Second, 10*time.Millisecond)
}

// TestCoordinationTwinTakesOverStopsWorker: when another process holds
// the worker's id after all (this one was paused past its lease and the
// other registered meanwhile), this worker stops with an error naming the
// duplicate instead of serving the same task queue twice.
func TestCoordinationTwinTakesOverStopsWorker(t *testing.T) {
	c := newCluster(t, 2)
	store := newCoordStore(t, time.Second)
	w, _, done := startRaw(t, alarmPipeline(c.ListenAddrs(), t.TempDir()), pipeline.WithWorkerID("c1"), pipeline.WithCoordination(store))
	require.Eventually(t, func() bool { return pipeline.Registered(w) }, 30*time.Second, 10*time.Millisecond)
	e, ok := presence(t, store, "c1")
	require.True(t, ok)
	other, err := json.Marshal(split.Presence{Worker: "c1", Instance: "the-other-process"})
	require.NoError(t, err)
	out, err := store.Update(context.Background(), coordination.Ephemeral, "worker.c1", other, e.Revision)
	require.NoError(t, err)
	require.True(t, out.Won())
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker kept running under a duplicate id")
	}
	require.ErrorIs(t, err, split.ErrDuplicateWorker)
	require.ErrorContains(t, err, "the-other-process")
}

// TestLeaseRenewalOutlivesTemporalOutage: the worker's coordination lease
// is renewed by its own goroutine, so cutting the worker off Temporal for
// longer than the lease TTL changes nothing there — the presence lease is
// renewed throughout and the hot path keeps applying records. After the
// outage (shorter than the lease workflow's heartbeat timeout) the lease
// activity heartbeats again in its first attempt: the worker was never
// declared dead. Then the coordination store goes away for longer than the
// TTL: the keeper reports its leases expired, the lease activity fails, the
// lease workflow restarts it (Restarts counts it) and, once the store is
// back, the activity runs again with the worker alive. Last, Temporal is
// unreachable for longer than the heartbeat timeout: the lease workflow
// declares the live worker dead and tells the pipeline's coordinator,
// which leaves its shards out of the rounds; back in touch, the worker
// starts a new lease workflow and announces its shards again at the same
// epochs: nothing moves, and rounds checkpoint them again.
func TestLeaseRenewalOutlivesTemporalOutage(t *testing.T) {
	srv := temporaltest.Start(t)
	kc := newCluster(t, 2)
	addrs := kc.ListenAddrs()
	const ttl = time.Second
	store := newCoordStore(t, ttl)
	rec := newRecorder()

	// The workflows run on a control worker that stays connected: the
	// outage is the pipeline worker's alone.
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(ctl)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()

	tcut := &faults.Net{}
	p := temporalPipeline(addrs, memory.New(), rec.shared())
	p.Checkpoint.HeartbeatTimeout = 15 * time.Second // heartbeats every 5s: outages up to ~10s pass unnoticed
	w := start(t, p, pipeline.WithWorkerID("w1"), pipeline.WithTemporal(dialThrough(t, srv, tcut)), pipeline.WithCoordination(store))
	require.Eventually(t, func() bool { return pipeline.Registered(w.w) && len(w.w.Shards()) == 2 }, 30*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leaseID := workflows.LeaseWorkflowID("w1")
	requireLeaseHeartbeat(t, ctx, srv.Client, leaseID)

	// Temporal unreachable for more than a lease TTL.
	before, ok := presence(t, store, "w1")
	require.True(t, ok)
	tcut.Cut()
	cutAt := time.Now()
	phase1 := makeReadings(8, 1, 30)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool {
		return pipeline.LastRenewal(w.w).After(cutAt.Add(2*ttl)) && rec.has(reference(t, p, phase1))
	}, 30*time.Second, 10*time.Millisecond, "renewals or the hot path stalled while Temporal was cut off")
	after, ok := presence(t, store, "w1")
	require.True(t, ok, "the presence lease expired while Temporal was unreachable")
	require.Greater(t, after.Revision, before.Revision, "the presence lease was not renewed during the outage")
	require.NoError(t, w.w.Err())
	tcut.Heal()
	healAt := time.Now()

	if !assert.Eventually(t, func() bool {
		a, ok := pendingLease(ctx, srv.Client, leaseID)
		return ok && a.GetAttempt() == 1 && a.GetLastHeartbeatTime().AsTime().After(healAt)
	}, 60*time.Second, 100*time.Millisecond, "the lease activity did not heartbeat again after the outage") {
		a, _ := pendingLease(ctx, srv.Client, leaseID)
		t.Fatalf("lease %+v; pending %v", queryLease(ctx, t, srv.Client, leaseID), a)
	}
	ls := queryLease(ctx, t, srv.Client, leaseID)
	require.Equal(t, workflows.LeaseAlive, ls.Status)
	require.Zero(t, ls.Restarts, "the lease activity was restarted: %s", ls.LastErr)
	require.Empty(t, ls.Handoffs)

	// The coordination store unreachable for more than a TTL.
	store.SetAvailable(false)
	require.Eventually(t, func() bool { return w.w.Err() != nil }, 30*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, w.w.Err(), split.ErrLeasesExpired)
	require.Eventually(t, func() bool { return queryLease(ctx, t, srv.Client, leaseID).Restarts >= 1 }, time.Minute, 100*time.Millisecond,
		"the lease workflow never saw the leases lost")
	ls = queryLease(ctx, t, srv.Client, leaseID)
	require.Contains(t, ls.LastErr, "leases expired")
	require.Equal(t, workflows.LeaseAlive, ls.Status, "a worker that lost its leases is not dead")
	store.SetAvailable(true)
	backAt := time.Now()
	require.Eventually(t, func() bool { return w.w.Err() == nil }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		a, ok := pendingLease(ctx, srv.Client, leaseID)
		return ok && a.GetLastHeartbeatTime().AsTime().After(backAt)
	}, time.Minute, 100*time.Millisecond, "the lease activity did not run again once the store was back")
	ls = queryLease(ctx, t, srv.Client, leaseID)
	require.Equal(t, workflows.LeaseAlive, ls.Status)
	require.Empty(t, ls.Handoffs)

	// Temporal unreachable for longer than the heartbeat timeout.
	desc, err := srv.Client.DescribeWorkflow(ctx, leaseID, "")
	require.NoError(t, err)
	firstRun := desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	epochs := heldEpochs(w.w)
	tcut.Cut()
	var dead workflows.LeaseState
	require.NoError(t, srv.Client.GetWorkflow(ctx, leaseID, firstRun).Get(ctx, &dead))
	require.Equal(t, workflows.LeaseDead, dead.Status)
	require.Equal(t, []string{workflows.CoordinatorWorkflowID(p.Name)}, dead.Told, "%+v", dead)
	require.Len(t, dead.Orphaned, 2, "%+v", dead)
	require.NoError(t, w.w.Err(), "the coordination lease outlived the Temporal outage")
	phase2 := makeReadings(8, 31, 40)
	produce(t, addrs, phase2)
	tcut.Heal()
	require.Eventually(t, func() bool {
		d, err := srv.Client.DescribeWorkflow(ctx, leaseID, "")
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() != firstRun &&
			d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, time.Minute, 100*time.Millisecond, "the worker did not start a new lease workflow")
	goneRound := uint64(0)
	require.Eventually(t, func() bool {
		st, err := queryCoordinator(ctx, srv.Client, p.Name)
		goneRound = st.Round
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)
	for shard, epoch := range epochs {
		var row workflows.ShardRow
		require.Eventually(t, func() bool {
			var err error
			row, err = queryShard(ctx, srv.Client, p.Name, shard)
			return err == nil && row.Owner.WorkerID == "w1" && row.Owner.Epoch == epoch && row.Status == workflows.ShardOK && row.Round > goneRound
		}, time.Minute, 100*time.Millisecond, "shard %s never came back into the rounds: %+v", shard, row)
		require.Empty(t, row.Handoff, "shard %s moved though nobody lost it", shard)
	}
	require.Equal(t, epochs, heldEpochs(w.w), "the worker kept its shards at the same epochs")

	// The hot path never stopped.
	all := append(phase1, phase2...)
	require.Eventually(t, func() bool { return rec.has(reference(t, p, all)) }, 30*time.Second, 10*time.Millisecond)
	rec.requireExact(t, reference(t, p, all))
}

func queryLease(ctx context.Context, t testing.TB, c client.Client, id string) workflows.LeaseState {
	t.Helper()
	v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	require.NoError(t, err)
	var st workflows.LeaseState
	require.NoError(t, v.Get(&st))
	return st
}

// pendingLease returns the lease workflow's pending KeepLeases activity.
func pendingLease(ctx context.Context, c client.Client, id string) (*workflowpb.PendingActivityInfo, bool) {
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil || d.RawResponse == nil {
		return nil, false
	}
	for _, pa := range d.RawResponse.GetPendingActivities() {
		if pa.GetActivityType().GetName() == "KeepLeases" {
			return pa, true
		}
	}
	return nil, false
}

// requireLeaseHeartbeat waits until the lease workflow id's pending
// KeepLeases activity has heartbeat.
func requireLeaseHeartbeat(t *testing.T, ctx context.Context, c client.Client, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		a, ok := pendingLease(ctx, c, id)
		return ok && !a.GetLastHeartbeatTime().AsTime().IsZero()
	}, 30*time.Second, 50*time.Millisecond, "the lease activity never heartbeat")
}

func heldEpochs(w *pipeline.Worker) map[streaming.ShardID]streaming.Epoch {
	out := map[streaming.ShardID]streaming.Epoch{}
	for _, s := range w.Shards() {
		out[s.Shard] = s.Epoch
	}
	return out
}

// TestLeaseStoppedBeforeItsActivityStarted: a worker that stops before
// its lease activity started (here: no control worker ran the lease
// workflow yet) tells the workflow of the stop, which then ends as
// stopped once a control worker runs it, instead of waiting out the
// activity's schedule-to-start timeout and declaring the worker dead.
func TestLeaseStoppedBeforeItsActivityStarted(t *testing.T) {
	srv := temporaltest.Start(t)
	kc := newCluster(t, 1)
	p := temporalPipeline(kc.ListenAddrs(), memory.New())
	w := start(t, p, pipeline.WithWorkerID("quick"), pipeline.WithTemporal(srv.Client))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leaseID := workflows.LeaseWorkflowID("quick")
	require.Eventually(t, func() bool {
		_, err := srv.Client.DescribeWorkflow(ctx, leaseID, "")
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the worker never started its lease workflow")
	w.stop(t)

	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	pipeline.RegisterWorkflows(ctl)
	require.NoError(t, ctl.Start())
	defer ctl.Stop()
	var ls workflows.LeaseState
	require.NoError(t, srv.Client.GetWorkflow(ctx, leaseID, "").Get(ctx, &ls))
	require.Equal(t, workflows.LeaseStopped, ls.Status, "last error: %s", ls.LastErr)
	require.Empty(t, ls.Told, "no coordinator was told of a death")
}
