package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
	"github.com/tflo-io/tflo/streaming"
)

// roundOnRoll is a sink that, when told a shard's next checkpoint is its
// last (Roll), runs stage 2 of the checkpoint the shard has in flight, if
// any: a round's SaveState arriving while the shard is being released.
type roundOnRoll struct {
	streaming.MemorySink
	k     *kafkaShard
	round streaming.CheckpointID
	err   error
}

func (r *roundOnRoll) Roll(streaming.ShardID) {
	if r.k == nil || r.round == 0 || r.k.cp.Status().InFlightID != r.round {
		return
	}
	_, r.err = r.k.cp.SaveState(context.Background(), r.round)
	r.round = 0
}

func (r *roundOnRoll) CommitCheckpoint(context.Context, streaming.ShardID, streaming.CheckpointID) (parquet.CommitStats, error) {
	return parquet.CommitStats{}, nil
}

func (r *roundOnRoll) Release(streaming.ShardID, streaming.Epoch) {}

// TestFinalCheckpointPublishesEveryArchivedRow: a partition's final
// checkpoint publishes every row it archived, even when a round's
// checkpoint cut earlier saves its state while the partition is being
// released. Bug: the release told the archive to roll before its final
// checkpoint; the earlier round's pre-commit took that roll (finishing
// the file at its own, older cut) and the final checkpoint left the rows
// after that cut in a file nobody published.
func TestFinalCheckpointPublishesEveryArchivedRow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	round := &roundOnRoll{}
	p := smaPipeline(t, 1)
	p.Sinks = []SinkSpec{ArchiveSink{Dir: dir}, Use(round)}
	_, k := openPartitionZero(ctx, t, p)
	recs := func(from, to int64) []*kgo.Record {
		var out []*kgo.Record
		for off := from; off <= to; off++ {
			out = append(out, &kgo.Record{Topic: "readings", Offset: off, Value: fmt.Appendf(nil, `{"sensor":"a","ts":%d,"value":1}`, off+1)})
		}
		return out
	}

	require.NoError(t, k.apply(ctx, recs(0, 2)))
	info, err := k.cp.Snapshot(ctx, 1) // a round cuts at offset 2
	require.NoError(t, err)
	require.NoError(t, k.apply(ctx, recs(3, 5)))
	round.k, round.round = k, info.ID
	require.NoError(t, k.Release(ctx, true))
	require.NoError(t, round.err)

	la, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	var offsets []int64
	for _, r := range archivetest.ReadIndependently(t, la, "") {
		offsets = append(offsets, r.Offset)
	}
	slices.Sort(offsets)
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5}, slices.Compact(offsets), "rows published by the final checkpoint")
}
