package central

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// TestArchiveSinkWriteDuringFlush: a Write that picked a partition's
// writer just before a concurrent Flush retired it (flushed and dropped
// from the map) appended its rows to the retired writer, and they never
// reached a file. Every row written while flushes run must be archived.
func TestArchiveSinkWriteDuringFlush(t *testing.T) {
	ctx := context.Background()
	la, err := parquet.NewLocalArchive(t.TempDir())
	require.NoError(t, err)
	s, err := NewArchiveSink(la, "race")
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
				require.NoError(t, s.Flush(ctx))
			}
		}
	})
	for i := range n {
		require.NoError(t, s.Write(ctx, []Output{{Sensor: "s", Signal: SignalMean, TS: int64(i), Value: float64(i), Partition: 0, Offset: int64(i), Epoch: 1}}))
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
