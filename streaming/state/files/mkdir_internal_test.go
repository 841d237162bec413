package files

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Open created a store's folder (and its missing parents: a worker's
// <dir>/<pipeline>/<shard>) without fsyncing their parents, so a crash
// could lose a new shard folder with every checkpoint a Save had
// reported durable in it. Each created folder's parent is fsynced now;
// a folder that existed is left alone.
func TestOpenMakesTheFoldersItCreatesDurable(t *testing.T) {
	var (
		mu     sync.Mutex
		synced []string
	)
	testHookFsyncFolder = func(path string) {
		mu.Lock()
		defer mu.Unlock()
		synced = append(synced, path)
	}
	t.Cleanup(func() { testHookFsyncFolder = nil })

	root := t.TempDir()
	dir := filepath.Join(root, "pipeline", "shard")
	s, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mu.Lock()
	require.ElementsMatch(t, []string{root, filepath.Join(root, "pipeline")}, synced,
		"the parents of the folders Open created")
	synced = nil
	mu.Unlock()

	s, err = Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mu.Lock()
	require.Empty(t, synced, "nothing created, nothing to fsync")
	mu.Unlock()

	s, err = Open(filepath.Join(root, "nosync"), WithSync(false))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mu.Lock()
	require.Empty(t, synced, "WithSync(false) skips the fsyncs")
	mu.Unlock()
}
