package central

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// The archive sink writes one file per partition and epoch at each
// flush, named by the offsets it covers, and drops writers left empty.
func TestArchiveSinkFilesPerPartitionAndEpoch(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	s, err := NewArchiveSink(a, "plant")
	require.NoError(t, err)
	out := func(part int32, epoch streaming.Epoch, off int64) []Output {
		return []Output{
			{Sensor: "s-1", Signal: SignalMean, TS: off * 1e6, Value: float64(off), Partition: part, Offset: off, Epoch: epoch},
			{Sensor: "s-1", Signal: SignalEpisode, TS: off * 1e6, Mode: EpisodeClosed, Value: 5, Partition: part, Offset: off, Epoch: epoch},
		}
	}
	for off := int64(10); off <= 12; off++ {
		require.NoError(t, s.Write(ctx, out(0, 7, off)))
	}
	require.NoError(t, s.Write(ctx, out(1, 7, 3)))
	require.NoError(t, s.Flush(ctx))
	require.NoError(t, s.Flush(ctx)) // nothing buffered: no new file
	require.NoError(t, s.Write(ctx, out(0, 9, 13)))
	require.NoError(t, s.Close(ctx))
	require.Equal(t, 3, a.Puts())

	objs, err := a.List(ctx, "plant/")
	require.NoError(t, err)
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	require.ElementsMatch(t, []string{
		parquet.FileKey{Pipeline: "plant", Shard: 0, Epoch: 7, First: 10, Last: 12}.Name(),
		parquet.FileKey{Pipeline: "plant", Shard: 0, Epoch: 9, First: 13, Last: 13}.Name(),
		parquet.FileKey{Pipeline: "plant", Shard: 1, Epoch: 7, First: 3, Last: 3}.Name(),
	}, names)

	r, err := parquet.NewReader(a, parquet.ShardPrefix("plant", 0))
	require.NoError(t, err)
	var rows []parquet.Row
	for e, err := range r.All(ctx, parquet.Position{}) {
		require.NoError(t, err)
		rows = append(rows, e.Row)
	}
	require.Len(t, rows, 8)
	require.Equal(t, parquet.Row{Sensor: "s-1", Signal: SignalEpisode, TS: 13e6, Mode: int32(EpisodeClosed), Value: 5, Offset: 13}, rows[7])
	s.mu.Lock()
	require.Empty(t, s.writers, "flushed writers are dropped")
	s.mu.Unlock()
}
