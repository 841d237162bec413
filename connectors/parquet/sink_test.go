package parquet_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// The archive sink writes one file per shard and epoch at each flush,
// named by the offsets it covers; a flush of one shard leaves the others
// buffered.
func TestSinkFilesPerShardAndEpoch(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	s, err := parquet.NewSink(a, "plant")
	require.NoError(t, err)
	out := func(part int32, epoch streaming.Epoch, off int64) []streaming.Output {
		sh := streaming.KafkaShard("readings", part)
		return []streaming.Output{
			{Shard: sh, Key: "s-1", Name: "mean", TS: off * 1e6, Value: float64(off), Offset: off, Epoch: epoch},
			{Shard: sh, Key: "s-1", Name: "alarm_episode", TS: off * 1e6, Mode: 2, Value: 5, Offset: off, Epoch: epoch},
		}
	}
	for off := int64(10); off <= 12; off++ {
		require.NoError(t, s.Write(ctx, out(0, 7, off)))
	}
	require.NoError(t, s.Write(ctx, out(1, 7, 3)))
	require.NoError(t, s.Flush(ctx, streaming.KafkaShard("readings", 0), 1))
	require.Equal(t, 1, a.Puts(), "a shard's pre-commit writes that shard's rows only")
	require.NoError(t, s.Flush(ctx, "", 0))
	require.NoError(t, s.Flush(ctx, "", 0)) // nothing buffered: no new file
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
	require.Equal(t, parquet.Row{Sensor: "s-1", Signal: "alarm_episode", TS: 13e6, Mode: 2, Value: 5, Offset: 13}, rows[7])
	o := rows[7].Output()
	require.Equal(t, rows[7], parquet.RowOf(o), "Row.Output and RowOf are inverses")
}

// TestSinkWriteDuringFlush: a Write that picked a shard's writer just
// before a concurrent Flush retired it (flushed and dropped from the map)
// appended its rows to the retired writer, and they never reached a file.
// Every row written while flushes run must be archived.
func TestSinkWriteDuringFlush(t *testing.T) {
	ctx := context.Background()
	la, err := parquet.NewLocalArchive(t.TempDir())
	require.NoError(t, err)
	s, err := parquet.NewSink(la, "race")
	require.NoError(t, err)
	const n = 3000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				require.NoError(t, s.Flush(ctx, "", 0))
			}
		}
	})
	sh := streaming.KafkaShard("readings", 0)
	for i := range n {
		require.NoError(t, s.Write(ctx, []streaming.Output{{Shard: sh, Key: "s", Name: "mean", TS: int64(i), Value: float64(i), Offset: int64(i), Epoch: 1}}))
	}
	close(stop)
	wg.Wait()
	require.NoError(t, s.Close(ctx))

	r, err := parquet.NewReader(la, parquet.ShardPrefix("race", 0), parquet.WithExpectedFingerprint(parquet.SchemaFingerprint()))
	require.NoError(t, err)
	seen := map[int64]bool{}
	for e, err := range r.All(ctx, parquet.Position{}) {
		require.NoError(t, err)
		seen[e.Row.Offset] = true
	}
	require.Len(t, seen, n, "rows lost between a Write and a concurrent Flush")
}
