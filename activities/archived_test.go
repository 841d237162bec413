package activities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// A checkpoint round's shard result carries what the shard's sinks
// committed to the archive at that checkpoint (reported from the commit
// notification, as the pipeline's archive sink does), so the
// coordinator's round summary can show it.
func TestRoundReportsArchivedRows(t *testing.T) {
	store := memory.New()
	src := &counterSource{}
	var cp *streaming.Checkpointer
	commits := int64(0)
	cp, err := streaming.NewCheckpointer("iot/readings/0", src, store, store,
		streaming.WithOwnership(streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return 5, true })),
		streaming.WithOnCommit(func(context.Context, streaming.CheckpointID) {
			commits++
			cp.ReportArchived(100*commits, 4096*commits)
		}))
	require.NoError(t, err)
	shards := activities.NewShards()
	shards.Register("iot", "readings/0", cp)
	src.apply(3)
	in := activities.RoundInput{Pipeline: "iot", Round: 1, WorkerID: "w1", Shards: []activities.ShardEpoch{{Shard: "readings/0", Epoch: 5}}}
	res := runRound(t, shards, in)
	require.Equal(t, activities.ShardOK, res.Shards[0].Status, res.Shards[0].Error)
	require.Equal(t, int64(100), res.Shards[0].ArchivedRows)
	require.Equal(t, int64(4096), res.Shards[0].ArchivedBytes)
	src.apply(3)
	in.Round = 2
	res = runRound(t, shards, in)
	require.Equal(t, int64(200), res.Shards[0].ArchivedRows, "the round's own checkpoint, not the first")
}
