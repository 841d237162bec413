package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestStaleAnnouncementIsNotSplitPerShard: one stale shard in a worker's
// announcement (another worker gained it since) made the worker announce
// each of its shards on its own, an update per shard in the coordinator's
// history (a rebalance's hundreds); the coordinator names the stale shards
// and the worker announces the rest again in one announcement.
func TestStaleAnnouncementIsNotSplitPerShard(t *testing.T) {
	tc := coordinatorServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p := Pipeline{Name: "plant", Checkpoint: Checkpoint{Disabled: true}}
	// w-0 owns readings/7 at epoch 5, a rebalance after the one that gave
	// w-1 its shards at epoch 3.
	in := workflows.CoordinatorInput{Pipeline: p.Name, Manual: true}
	_, err := workflows.Announce(ctx, tc, in, workflows.Announcement{WorkerID: "w-0", TaskQueue: workflows.WorkerTaskQueue("w-0"),
		Shards: []activities.ShardEpoch{{Shard: "readings/7", Epoch: 5}}})
	require.NoError(t, err)

	const n = 20
	w := handBuiltWorker(p, "w-1")
	c := newWorkflowControl(w, tc)
	for i := range n {
		s := &shard{w: w, id: streaming.ShardID(fmt.Sprintf("readings/%d", i)), epoch: 3}
		w.host.held[s.id] = s
		c.gained(s)
	}
	require.NoError(t, c.announce(ctx))

	v, err := tc.QueryWorkflow(ctx, workflows.CoordinatorWorkflowID(p.Name), "", workflows.QueryShards)
	require.NoError(t, err)
	var rows []workflows.ShardRow
	require.NoError(t, v.Get(&rows))
	require.Len(t, rows, n)
	for _, r := range rows {
		want := "w-1"
		if r.Shard == "readings/7" {
			want = "w-0"
		}
		require.Equal(t, want, r.Owner.WorkerID, "owner of %s", r.Shard)
	}
	updates := 0
	for _, ev := range temporaltest.History(t, ctx, tc, workflows.CoordinatorWorkflowID(p.Name), "") {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
			updates++
		}
	}
	require.Equal(t, 2, updates, "one announcement of w-0, one of w-1's %d shards less the stale one; not one per shard", n)
}
