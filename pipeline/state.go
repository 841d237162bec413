package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/lograte"
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
		// Named by its key, so a reader finds where it was set
		// (${STATE_DIR:-...} in the repository's specs).
		return nil, fmt.Errorf("state.dir %s: %w", dir, err)
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

// pieceBytes is the size of the checkpoint pieces of the shards'
// runtimes: keyedstate's default (1 MiB), unless the checkpoints go to
// the state database itself and that is in memory (no state.dir and no
// durable store), which refuses a value above its value threshold (at
// most 1 MiB, less under a smaller budget, see keyedstate.BadgerOptions):
// then half of it, which leaves a piece room for the key it ends on.
func pieceBytes(st State) int {
	if st.Dir != "" || !st.Durable.inStateDB() {
		return keyedstate.DefaultPieceBytes
	}
	return int(inMemoryValueLimit(st) / 2)
}

// inMemoryValueLimit is the largest value the state database takes when
// it is in memory (no state.dir; 0 on disk): the value threshold it is
// opened with.
func inMemoryValueLimit(st State) int64 {
	if st.Dir != "" {
		return 0
	}
	return keyedstate.BadgerOptions("", int64(st.Memory)).ValueThreshold
}

// openDurable opens the durable checkpoint store state.Durable (the state
// database itself when it names none) and returns it with its close
// function. An S3 store's requests are measured on reg (when not nil; the
// caller labels it by pipeline).
func openDurable(ctx context.Context, state State, db *badger.DB, log *slog.Logger, reg prometheus.Registerer) (streaming.StateStore, func() error, error) {
	d := state.Durable
	if d.inStateDB() {
		if db == nil {
			return nil, nil, errors.New("no durable store and no state database")
		}
		st, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithPrefix([]byte(checkpointPrefix)),
			badgerstore.WithValueLimit(inMemoryValueLimit(state)))
		if err != nil {
			return nil, nil, err
		}
		// Said at start: a second worker of the pipeline would restore the
		// shards it gains from its own database (nothing, or its own older
		// checkpoints), not from these.
		log.Info("checkpoints go to this worker's own state database: run one worker of this pipeline, " +
			"or share them with state.durable.dir (one machine) or state.durable.s3, so a shard another worker gains restores from them")
		return st, st.Close, nil
	}
	nop := func() error { return nil }
	switch {
	case d.Store != nil:
		return d.Store, nop, nil
	case d.Dir != "":
		// One files store per shard, opened with the shard
		// (openShardDurable): no store for the whole worker.
		return nil, nop, checkDurableFolder(d.Dir)
	default: // d.S3 != nil
		s := d.S3
		opts := []s3.Option{s3.WithPrefix(s.Prefix), s3.WithLogger(log)}
		if s.Endpoint != "" {
			opts = append(opts, s3.WithEndpoint(s.Endpoint), s3.WithPathStyle(true))
		}
		if s.Region != "" {
			opts = append(opts, s3.WithRegion(s.Region))
		}
		if s.AccessKeyEnv != "" {
			// Both variables must hold a key (Validate checked both are
			// named): two empty keys would fall back to the SDK's default
			// chain, other credentials than the spec names, and one alone
			// was refused without saying which variable is missing.
			for _, v := range [...]struct{ key, name string }{{"access_key_env", s.AccessKeyEnv}, {"secret_key_env", s.SecretKeyEnv}} {
				if os.Getenv(v.name) == "" {
					return nil, nil, fmt.Errorf("durable bucket %s: state.durable.s3.%s names %s, which is unset or empty", s.Bucket, v.key, v.name)
				}
			}
			opts = append(opts, s3.WithStaticCredentials(os.Getenv(s.AccessKeyEnv), os.Getenv(s.SecretKeyEnv), ""))
		}
		if s.TLS != nil {
			// A private CA is trusted beside the system roots.
			c := *s.TLS
			c.SystemRoots = true
			tc, err := c.Build()
			if err != nil {
				return nil, nil, fmt.Errorf("durable bucket %s: %w", s.Bucket, err)
			}
			opts = append(opts, s3.WithTLSConfig(tc))
		}
		if s.ResponseTimeout > 0 {
			opts = append(opts, s3.WithResponseTimeout(s.ResponseTimeout))
		}
		if reg != nil {
			m := s3.NewRequestMetrics(nil, s.Bucket)
			if err := register(reg, m.Requests, m.Seconds, m.Bytes); err != nil {
				return nil, nil, fmt.Errorf("durable bucket %s: metrics: %w", s.Bucket, err)
			}
			opts = append(opts, s3.WithAPIOptions(m.Register))
		}
		st, err := s3.New(ctx, s.Bucket, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("durable bucket %s: %w", s.Bucket, err)
		}
		return st, nop, nil
	}
}

// checkpointName is the name of a shard's checkpoints in the durable
// store: the prefix of its pieces and manifest, and its cursor key.
func checkpointName(pipeline string, shard streaming.ShardID) string {
	return pipeline + "/" + string(shard)
}

// keyOptions are the keyed-state options for hostile keys (State.MaxKeys,
// State.KeyTTL) and the quarantine of a key whose state does not load:
// logged (sampled) with the key shortened and counted, the shard
// carries on.
func (w *Worker) keyOptions(id streaming.ShardID) []keyedstate.Option {
	st := w.c.p.State
	opts := []keyedstate.Option{keyedstate.WithQuarantine(func(key []byte, err error) {
		w.m.quarantined.Add(1)
		// Sampled: a checkpoint whose keys all fail to load would write
		// a line per key (the counter stays exact).
		if ok, skipped := w.quarantineLog.Allow(); ok {
			w.log.Warn("key quarantined: its stored state does not load; it starts afresh", lograte.With(skipped, "shard", id, "key", streaming.QuoteKey(key), "err", err)...)
		}
	})}
	if st.MaxKeys > 0 {
		opts = append(opts, keyedstate.WithMaxKeys(st.MaxKeys))
	}
	if st.KeyTTL > 0 {
		opts = append(opts, keyedstate.WithKeyTTL(st.KeyTTL))
	}
	return opts
}

// expireEvery sweeps the held shards' idle keys (State.KeyTTL) every
// interval until ctx ends.
func (w *Worker) expireEvery(ctx context.Context, ttl time.Duration) {
	t := time.NewTicker(max(ttl/8, 250*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, s := range w.shards() {
			n, err := s.rt.ExpireIdle(ctx)
			w.m.expired.Add(uint64(n))
			switch {
			case err == nil:
				if n > 0 {
					w.log.Info("idle keys expired", "shard", s.id, "keys", n, "ttl", ttl)
				}
			case errors.Is(err, keyedstate.ErrClosed) || ctx.Err() != nil:
				// Released meanwhile.
			default:
				w.log.Warn("expiring idle keys failed; the next sweep retries", "shard", s.id, "err", err)
			}
		}
	}
}
