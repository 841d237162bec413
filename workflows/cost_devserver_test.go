package workflows_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestTemporalCostDoesNotGrowWithShards holds the design's promise on a
// real dev server: Temporal pays per worker per round, never per shard.
// A coordinator's round over 2 workers writes as many history events with
// 256 shards as with 4, and a lease renewing for a worker of 128 shards
// writes no event per renewal (heartbeats are not history).
func TestTemporalCostDoesNotGrowWithShards(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	startControlWorker(t, c)

	const rounds = 5
	perRound := map[int]float64{}
	var big *fakeactivities.MemoryShards
	for _, shards := range []int{4, 256} {
		pipeline := fmt.Sprintf("cost-%d", shards)
		ids := []string{pipeline + "-w1", pipeline + "-w2"}
		ms, err := fakeactivities.NewMemoryShards(pipeline, shards, 2, 8, memory.New(), ids...)
		require.NoError(t, err)
		startMemoryWorkers(t, c, ms, ids...)
		in := workflows.CoordinatorInput{Pipeline: pipeline, Manual: true}
		first := announceAll(t, ctx, c, in, ms)
		id := workflows.CoordinatorWorkflowID(pipeline)
		round := func() {
			ms.Touch()
			s, err := workflows.CheckpointRoundNow(ctx, c, pipeline, "cost")
			require.NoError(t, err)
			require.Equal(t, shards, s.OK, "round %d: %s", s.Round, s)
		}
		round() // the first round writes the base state
		before := countChain(t, c, id, first)
		for range rounds {
			round()
		}
		after := countChain(t, c, id, first)
		perRound[shards] = float64(after.events-before.events) / rounds
		t.Logf("%d shards on 2 workers: %.1f events, %.1f actions per round", shards, perRound[shards], float64(after.actions-before.actions)/rounds)
		require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalStop, workflows.StopRequest{Reason: "test"}))
		big = ms
	}
	// A workflow task may take one answer or both: a little slack, never
	// a share of the 64-fold shards.
	assert.LessOrEqual(t, perRound[256], perRound[4]+3, "events per round grow with the shards: %v", perRound)

	// The lease of a worker holding 128 shards: renewals write nothing.
	workerID := "cost-256-w1"
	lw := worker.New(c, workflows.WorkerTaskQueue("lease-"+workerID), worker.Options{})
	lw.RegisterActivity(&activities.Leases{Host: big.HandoffHost(workerID)})
	require.NoError(t, lw.Start())
	t.Cleanup(lw.Stop)
	const hb = 900 * time.Millisecond // renewals every 300ms
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.LeaseWorkflowID(workerID), TaskQueue: workflows.ControlTaskQueue},
		workflows.LeaseWorkflow, workflows.LeaseInput{WorkerID: workerID, TaskQueue: workflows.WorkerTaskQueue("lease-" + workerID), HeartbeatTimeout: hb})
	require.NoError(t, err)
	lastBeat := func() time.Time {
		d, err := c.DescribeWorkflow(ctx, run.GetID(), run.GetRunID())
		require.NoError(t, err)
		pending := d.RawResponse.GetPendingActivities()
		if len(pending) == 0 {
			return time.Time{}
		}
		return pending[0].GetLastHeartbeatTime().AsTime()
	}
	var firstBeat time.Time
	require.Eventually(t, func() bool { firstBeat = lastBeat(); return firstBeat.Unix() > 0 }, 30*time.Second, 50*time.Millisecond)
	events := len(temporaltest.History(t, ctx, c, run.GetID(), run.GetRunID()))
	// Heartbeats reach the server at most every 0.8 × the timeout: wait
	// for several more.
	require.Eventually(t, func() bool { return lastBeat().Sub(firstBeat) >= 3*hb }, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, events, len(temporaltest.History(t, ctx, c, run.GetID(), run.GetRunID())), "renewals of the lease wrote history events")
	require.NoError(t, c.SignalWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.SignalStop, workflows.StopRequest{Reason: "test"}))
	var st workflows.LeaseState
	require.NoError(t, run.Get(ctx, &st))
	assert.Equal(t, workflows.LeaseStopped, st.Status)
}
