package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/dgraph-io/badger/v4"

	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
)

// Badger key prefixes of the worker's state database: the shards' keyed
// state (one prefix per shard), and the checkpoints when the database is
// also the durable store.
const (
	statePrefix      = "state/"
	checkpointPrefix = "checkpoints/"
)

// openStateDB opens the worker's Badger database of hot state at dir (in
// memory when dir is empty), its memtables and caches sized from budget.
func openStateDB(dir string, budget int64) (*badger.DB, error) {
	opts := keyedstate.BadgerOptions(dir, budget).WithLogger(nil)
	if dir == "" {
		opts = opts.WithInMemory(true)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	db, err := badger.Open(opts)
	if err != nil {
		where := dir
		if where == "" {
			where = "(in memory)"
		}
		return nil, fmt.Errorf("state database %s: %w", where, err)
	}
	return db, nil
}

// openDurable opens the durable checkpoint store d (the state database
// itself when d names none) and returns it with its close function.
func openDurable(ctx context.Context, d Durable, db *badger.DB, log *slog.Logger) (streaming.StateStore, func() error, error) {
	nop := func() error { return nil }
	switch {
	case d.Store != nil:
		return d.Store, nop, nil
	case d.Dir != "":
		// One files store per shard, opened with the shard
		// (openShardDurable): no store for the whole worker.
		return nil, nop, checkDurableFolder(d.Dir)
	case d.S3 != nil:
		s := d.S3
		opts := []s3.Option{s3.WithPrefix(s.Prefix), s3.WithLogger(log)}
		if s.Endpoint != "" {
			opts = append(opts, s3.WithEndpoint(s.Endpoint), s3.WithPathStyle(true))
		}
		if s.Region != "" {
			opts = append(opts, s3.WithRegion(s.Region))
		}
		if s.AccessKeyEnv != "" {
			opts = append(opts, s3.WithStaticCredentials(os.Getenv(s.AccessKeyEnv), os.Getenv(s.SecretKeyEnv), ""))
		}
		st, err := s3.New(ctx, s.Bucket, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("durable bucket %s: %w", s.Bucket, err)
		}
		return st, nop, nil
	}
	if db == nil {
		return nil, nil, errors.New("no durable store and no state database")
	}
	st, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithPrefix([]byte(checkpointPrefix)))
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}

// checkpointName is the name of a shard's checkpoints in the durable
// store: the prefix of its pieces and manifest, and its cursor key.
func checkpointName(pipeline string, shard streaming.ShardID) string {
	return pipeline + "/" + string(shard)
}
