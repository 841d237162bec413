package archivetest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// StaleTempFiles writes two temp files of the kind a local archive's
// PutAtomic leaves while it writes, in the staging folder of pipeline's
// shard under the local archive at dir: stale, last written two hours
// ago (what a crashed writer left; a sweep deletes temp files over an
// hour old), and live, written now (a writer at work; a sweep keeps it).
func StaleTempFiles(tb testing.TB, dir, pipeline string, shard int32) (stale, live string) {
	tb.Helper()
	folder := filepath.Join(dir, filepath.FromSlash(parquet.StagingPrefix(pipeline, shard)))
	require.NoError(tb, os.MkdirAll(folder, 0o755))
	stale, live = filepath.Join(folder, ".tmp-rec-111"), filepath.Join(folder, ".tmp-rec-222")
	for _, p := range []string{stale, live} {
		require.NoError(tb, os.WriteFile(p, []byte("ha"), 0o644))
	}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(tb, os.Chtimes(stale, old, old))
	return stale, live
}
