package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
)

// A durable folder (State.Durable.Dir) holds one folder per shard,
// <dir>/<pipeline>/<shard>, each a files store that the shard's owner
// opens when it gains the shard and closes when it releases it. A files
// store locks its folder for one process, so several worker processes on
// one machine (or on a shared file system) share the durable folder, and
// the lock also fences a shard on that machine: a new owner waits until
// the old one released it.

// shardFolderName is the folder of a shard inside a durable folder: the
// shard id with every byte outside [A-Za-z0-9_-] (and a '.') written as
// %XX, so ids that differ get folders that differ, none is hidden or a
// path, and "readings/2" is "readings%2F2".
func shardFolderName(id streaming.ShardID) string {
	var b strings.Builder
	for _, c := range []byte(id) {
		if c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// shardFolderRetry is how often a gained shard retries a durable folder
// its previous owner still holds.
const shardFolderRetry = 50 * time.Millisecond

// openShardDurable returns the durable store of shard id and its close
// function: the worker's one durable store, or with a durable folder the
// shard's own folder, opened once the process that held it (the shard's
// previous owner, still releasing it) let go, or ctx ends.
func (w *Worker) openShardDurable(ctx context.Context, id streaming.ShardID) (streaming.StateStore, func() error, error) {
	dir := w.c.p.State.Durable.Dir
	if dir == "" {
		return w.durable, func() error { return nil }, nil
	}
	path := filepath.Join(dir, w.c.p.Name, shardFolderName(id))
	for {
		st, err := files.Open(path)
		if err == nil {
			return st, st.Close, nil
		}
		if !errors.Is(err, files.ErrLocked) {
			return nil, nil, fmt.Errorf("shard %s: durable folder %s: %w", id, path, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("shard %s: durable folder %s is still held by another worker process (the shard's previous owner?): %w", id, path, err)
		case <-time.After(shardFolderRetry):
		}
	}
}

// checkDurableFolder refuses a durable folder that holds checkpoints at
// its top level: the layout before per-shard folders, which this worker
// would not read (every shard would start empty).
func checkDurableFolder(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durable folder %s: %w", dir, err)
	}
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && (strings.HasPrefix(n, "s-") || strings.HasPrefix(n, "c-") || strings.HasPrefix(n, "sh-") || strings.HasPrefix(n, "ch-")) {
			return fmt.Errorf("durable folder %s holds checkpoints at its top level (%s), the layout of one folder per worker: this worker keeps each shard in <dir>/<pipeline>/<shard>; start from an empty folder, or run the old version to finish with this one", dir, n)
		}
	}
	return nil
}
