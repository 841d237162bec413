package keyedstate

import (
	"context"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/tflo-io/tflo/streaming"
)

// expireBatch is how many stored keys ExpireIdle collects per scan of
// Badger, and checks and deletes per hold of the lock.
const expireBatch = 1024

// ExpireIdle deletes every key unseen for the key TTL (WithKeyTTL), with
// its state, as Tx.Delete does: the next checkpoint records the
// deletions. It returns how many keys it deleted (also counted in
// Stats.Expired); with no TTL it does nothing.
//
// It scans the cached keys and the write-behind buffers under the lock,
// then the keys in Badger outside it (reading each stored value's header:
// O(state) reads), and deletes the idle ones in chunks under the lock, so
// the hot path waits at most one chunk. Call it every fraction of the
// TTL, from any goroutine.
func (r *Runtime[K]) ExpireIdle(ctx context.Context) (int, error) {
	// Whole seconds, rounded up: when keys were last seen is kept in
	// whole seconds, and a TTL rounded down (1.5s to 1s) expired keys
	// unseen for less than it.
	ttl := int64((r.cfg.keyTTL + time.Second - 1) / time.Second)
	if ttl <= 0 {
		return 0, nil
	}
	cutoff := r.cfg.now().Unix() - ttl
	expired := 0

	// The cached keys: their entry holds when they were last seen.
	r.mu.Lock()
	if err := r.usable(); err != nil {
		r.mu.Unlock()
		return 0, err
	}
	var idle []K
	for k, e := range r.cache {
		if e.live && !e.absent && e.seen < cutoff {
			idle = append(idle, k)
		}
	}
	// The write-behind buffers (bounded: two write batches) hold states
	// not yet in Badger; the newer of the two wins.
	for _, b := range []*batch[K]{r.pending, r.flushing} {
		if b == nil {
			continue
		}
		for k, sp := range b.idx {
			if _, cached := r.cache[k]; cached || sp.del {
				continue
			}
			if b == r.flushing {
				if _, newer := r.pending.idx[k]; newer {
					continue
				}
			}
			if sv, err := splitStored(b.arena[sp.off:sp.end]); err == nil && sv.seen < cutoff {
				idle = append(idle, k)
			}
		}
	}
	for _, k := range idle {
		if err := r.tx.Delete(k); err != nil {
			r.mu.Unlock()
			return expired, fmt.Errorf("keyedstate: expire key %s: %w", streaming.QuoteKey(r.keyBytes(k)), err)
		}
		// Counted one by one: the keys deleted before a failure are gone.
		expired++
		r.stats.Expired++
	}
	r.mu.Unlock()

	// The stored keys, a batch at a time: found in a read view outside
	// the lock, checked again (cache, write-behind, Badger) under it.
	var from []byte
	for {
		if err := ctx.Err(); err != nil {
			return expired, err
		}
		cands, next, err := r.scanIdle(from, cutoff)
		if err != nil {
			return expired, err
		}
		n, err := r.expireStored(cands, cutoff)
		expired += n
		if err != nil || next == nil {
			return expired, err
		}
		from = next
	}
}

// scanIdle checks up to expireBatch stored keys from the full key from
// (nil: from the first) and returns those whose stored state was last
// seen before cutoff, and the first key it did not check, to continue
// from (nil at the end): that key is checked by the next call, not
// skipped.
func (r *Runtime[K]) scanIdle(from []byte, cutoff int64) ([]K, []byte, error) {
	prefix := r.cfg.prefix
	var cands []K
	var next []byte
	err := r.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefix
		it := txn.NewIterator(opts)
		defer it.Close()
		scanned := 0
		start := prefix
		if from != nil {
			start = from
		}
		for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
			item := it.Item()
			if scanned == expireBatch {
				next = item.KeyCopy(nil)
				return nil
			}
			scanned++
			kb := item.Key()[len(prefix):]
			var sv storedVal
			if err := item.Value(func(v []byte) error {
				var err error
				sv, err = splitStored(v)
				return err
			}); err != nil {
				return fmt.Errorf("keyedstate: expiry scan: stored state of key %s: %w", streaming.QuoteKey(kb), err)
			}
			if sv.seen >= cutoff {
				continue
			}
			k, err := r.codec.DecodeKey(kb)
			if err != nil {
				return fmt.Errorf("keyedstate: expiry scan: key %s: %w", streaming.QuoteKey(kb), err)
			}
			cands = append(cands, k)
		}
		return nil
	})
	return cands, next, err
}

// expireStored deletes the candidates still idle: not cached (a cached
// key was seen since it was loaded or the cache pass judged it) and
// stored with a last-seen time before cutoff.
func (r *Runtime[K]) expireStored(cands []K, cutoff int64) (int, error) {
	if len(cands) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return 0, err
	}
	n := 0
	for _, k := range cands {
		if _, ok := r.cache[k]; ok {
			continue
		}
		sv, found, err := r.lookupStored(k, r.keyBytes(k))
		if err != nil {
			return n, err
		}
		if !found || sv.seen >= cutoff {
			continue
		}
		if err := r.tx.Delete(k); err != nil {
			return n, fmt.Errorf("keyedstate: expire key %s: %w", streaming.QuoteKey(r.keyBytes(k)), err)
		}
		n++
		r.stats.Expired++
	}
	return n, nil
}
