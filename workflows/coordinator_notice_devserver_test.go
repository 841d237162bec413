package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// failingHost is a worker whose every shard fails on storage; it records
// the coordinator's notices.
type failingHost struct {
	mu      sync.Mutex
	notices []activities.CoordinatorNotice
}

func (h *failingHost) CheckpointRound(_ context.Context, in activities.RoundInput) (activities.RoundResult, error) {
	res := activities.RoundResult{Round: in.Round, WorkerID: in.WorkerID}
	for _, s := range in.Shards {
		res.Shards = append(res.Shards, activities.ShardResult{Shard: s.Shard, Epoch: s.Epoch, Status: activities.ShardFailed, Error: "put: 503 slow down"})
	}
	return res, nil
}

func (h *failingHost) Notice(_ context.Context, n activities.CoordinatorNotice) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notices = append(h.notices, n)
	return nil
}

func (h *failingHost) noticed() []activities.CoordinatorNotice {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]activities.CoordinatorNotice(nil), h.notices...)
}

// TestBreakerNoticeReachesWorkersAcrossContinueAsNew: the round that opens
// the breaker is the last of the coordinator's run (it continues as new
// after it). The workers are still told the breaker opened, so they take
// no local checkpoints during the cool-down. Before, the run scheduled the
// notices and continued as new in the same workflow task: the server never
// starts an activity of a closed run, so no worker heard of the pause.
func TestBreakerNoticeReachesWorkersAcrossContinueAsNew(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startControlWorker(t, c)
	host := &failingHost{}
	w := worker.New(c, workflows.WorkerTaskQueue("w1"), worker.Options{})
	w.RegisterActivity(&activities.Rounds{Host: host})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	in := workflows.CoordinatorInput{Pipeline: "iot-notice", Interval: activities.Duration(200 * time.Millisecond), ReachTimeout: activities.Duration(5 * time.Second),
		BreakerThreshold: 1, BreakerCoolDown: activities.Duration(time.Hour), ContinueAsNewAfter: 1}
	_, err := workflows.Announce(ctx, c, in, announcement("w1", 1, "readings/0"))
	require.NoError(t, err)
	waitFor(t, func() bool {
		st := coordinatorStatus(t, c, in.Pipeline)
		return st.Generation >= 1 && st.Breaker == workflows.BreakerOpen
	})
	require.Eventually(t, func() bool { return len(host.noticed()) > 0 }, 15*time.Second, 50*time.Millisecond,
		"the worker was never told the breaker opened")
	n := host.noticed()[0]
	assert.Equal(t, workflows.BreakerOpen, n.Breaker)
	assert.Equal(t, uint64(1), n.Round)
	require.NoError(t, c.SignalWorkflow(ctx, workflows.CoordinatorWorkflowID(in.Pipeline), "", workflows.SignalStop, workflows.StopRequest{Reason: "test"}))
}
