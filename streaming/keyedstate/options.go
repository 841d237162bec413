package keyedstate

import (
	"fmt"
	"time"
)

// Option configures a Runtime.
type Option func(*config)

type config struct {
	budget          int64
	entryBytes      int
	writeBatchBytes int
	pieceBytes      int
	prefix          []byte
	chunkKeys       int
	dbShare         int
	gcHeadroom      float64

	// Hostile keys (see WithMaxKeys, WithKeyTTL, WithQuarantine).
	maxKeys      int
	keyTTL       time.Duration
	onQuarantine func(key []byte, err error)
	now          func() time.Time
}

func defaultConfig() config {
	return config{
		budget:          64 << 20,
		writeBatchBytes: 0, // from the budget
		pieceBytes:      DefaultPieceBytes,
		prefix:          []byte("keyedstate/"),
		chunkKeys:       256,
		dbShare:         1,
		gcHeadroom:      1.0 / 3,
		now:             time.Now,
	}
}

func (c *config) validate() error {
	if c.budget <= 0 {
		return fmt.Errorf("keyedstate: memory budget %d bytes must be positive", c.budget)
	}
	if c.writeBatchBytes == 0 {
		c.writeBatchBytes = int(min(max(c.budget/64, 64<<10), 4<<20))
	}
	if c.writeBatchBytes <= 0 {
		return fmt.Errorf("keyedstate: write batch size %d bytes must be positive", c.writeBatchBytes)
	}
	if !(c.gcHeadroom >= 0 && c.gcHeadroom < 1) {
		return fmt.Errorf("keyedstate: GC headroom %v must be at least 0 and below 1", c.gcHeadroom)
	}
	if c.dbShare < 1 {
		return fmt.Errorf("keyedstate: DB share %d must be at least 1", c.dbShare)
	}
	if c.pieceBytes <= 0 {
		return fmt.Errorf("keyedstate: piece size %d bytes must be positive", c.pieceBytes)
	}
	if c.entryBytes < 0 {
		return fmt.Errorf("keyedstate: entry size %d bytes must not be negative", c.entryBytes)
	}
	if c.maxKeys < 0 {
		return fmt.Errorf("keyedstate: key cap %d must not be negative (0: no cap)", c.maxKeys)
	}
	if c.keyTTL != 0 && c.keyTTL < time.Second {
		return fmt.Errorf("keyedstate: key TTL %v must be at least 1s (0: keys never expire)", c.keyTTL)
	}
	if c.now == nil {
		return fmt.Errorf("keyedstate: nil clock")
	}
	if len(c.prefix) == 0 || c.prefix[0] == 0xff {
		// The spilled lists of changed keys (runsPrefix) and the read
		// view's pin key start with 0xff: under such a prefix, Restore
		// would count them and ExpireIdle take them for idle keys.
		return fmt.Errorf("keyedstate: prefix %q must not be empty or start with 0xff (the spilled lists of changed keys are under %q)", c.prefix, runsPrefix)
	}
	if c.chunkKeys < 1 {
		return fmt.Errorf("keyedstate: save chunk %d keys must be at least 1", c.chunkKeys)
	}
	return nil
}

// WithMemoryBudget sets the memory the runtime and its Badger database
// may use (default 64 MiB); see the package doc for what it covers. A
// part is left to the garbage collector (WithGCHeadroom); Badger's
// memtables and caches are read from the DB's options (open it with
// BadgerOptions(dir, bytes) to size them from the same budget); two
// write-behind batches are reserved; the rest holds the cache, the keys
// changed since the last cut and a pending cut's copy-on-write states.
func WithMemoryBudget(bytes int64) Option { return func(c *config) { c.budget = bytes } }

// WithGCHeadroom sets the part of the budget left free for the Go garbage
// collector (default a third): the runtime keeps what it holds live (its
// cache, Badger's memtables, ...) to the rest, so that a process run with
// GOMEMLIMIT at the sum of its runtimes' budgets stays within it without
// collecting garbage all the time.
func WithGCHeadroom(fraction float64) Option { return func(c *config) { c.gcHeadroom = fraction } }

// WithDBShare says the DB is shared by n runtimes (one per partition,
// each under its own prefix, each given its part of the budget): each
// counts 1/n of Badger's memtables and caches. Default 1.
func WithDBShare(n int) Option { return func(c *config) { c.dbShare = n } }

// WithEntryBytes sets the memory one cached key costs (default: measured
// at construction by building instances of the graph, plus map overhead).
// Set it for operators whose state grows after construction.
func WithEntryBytes(n int) Option { return func(c *config) { c.entryBytes = n } }

// WithWriteBatchBytes sets the size at which the write-behind buffer is
// handed to the flusher as one Badger WriteBatch (default: a 64th of the
// budget, from 64 KiB to 4 MiB).
func WithWriteBatchBytes(n int) Option { return func(c *config) { c.writeBatchBytes = n } }

// DefaultPieceBytes is the size of a checkpoint piece unless
// WithPieceBytes sets another.
const DefaultPieceBytes = 1 << 20

// WithPieceBytes sets the approximate size of a checkpoint piece (default
// DefaultPieceBytes): a piece ends with the first key that takes it to n
// bytes or more, so it may pass n by one key's state.
func WithPieceBytes(n int) Option { return func(c *config) { c.pieceBytes = n } }

// WithPrefix sets the Badger key prefix of the runtime's keys (default
// "keyedstate/"): not empty, and not starting with 0xff (New refuses
// it: the runtime's spilled lists of changed keys are under
// "\xffkeyedstate-changed/"). Give each runtime sharing a DB its own
// prefix; Restore drops everything under it.
func WithPrefix(p []byte) Option {
	return func(c *config) { c.prefix = append([]byte(nil), p...) }
}

// WithSaveChunk sets how many keys a checkpoint save reads per hold of the
// runtime's lock (default 256): smaller means shorter hot-path pauses
// during a save, larger means fewer of them.
func WithSaveChunk(keys int) Option { return func(c *config) { c.chunkKeys = keys } }

// WithMaxKeys caps the keys the runtime holds, in memory and in Badger
// (default 0: no cap). A record of a new key over the cap is refused:
// Tx.Eval returns an error wrapping ErrTooManyKeys, counted in
// Stats.KeysRefused, and the keys already held carry on. Deleted and
// expired keys make room.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithKeyTTL makes a key unseen for d (processing time: the clock of the
// process applying its records) expire: ExpireIdle deletes it with its
// state, in the cache and in Badger, like Tx.Delete, and the next
// checkpoint records the deletion (default 0: keys never expire; at
// least 1s; a fraction of a second counts as a whole one: when keys were
// last seen is kept in whole seconds). Checkpoints carry when each key was last seen, so a key's
// age survives a restore.
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.keyTTL = d } }

// WithQuarantine sets the function told about a key whose stored state
// does not load (Instance.Load refused it: a corrupt or poisoned state).
// The key is quarantined either way: its state is reset, as for a new
// key, the record is applied to the fresh state and the refusal is
// counted in Stats.Quarantined; the next checkpoint overwrites the bad
// state. key is only valid during the call; the default does nothing.
func WithQuarantine(f func(key []byte, err error)) Option {
	return func(c *config) { c.onQuarantine = f }
}

// WithClock sets the clock of key expiry (default time.Now), for tests.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }
