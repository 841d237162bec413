package keyedstate

import (
	"fmt"
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
}

func defaultConfig() config {
	return config{
		budget:          64 << 20,
		writeBatchBytes: 4 << 20,
		pieceBytes:      1 << 20,
		prefix:          []byte("keyedstate/"),
		chunkKeys:       256,
		dbShare:         1,
	}
}

func (c *config) validate() error {
	if c.budget <= 0 {
		return fmt.Errorf("keyedstate: memory budget %d bytes must be positive", c.budget)
	}
	if c.writeBatchBytes <= 0 {
		return fmt.Errorf("keyedstate: write batch size %d bytes must be positive", c.writeBatchBytes)
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
	if c.chunkKeys < 1 {
		return fmt.Errorf("keyedstate: save chunk %d keys must be at least 1", c.chunkKeys)
	}
	return nil
}

// WithMemoryBudget sets the memory the runtime and its Badger database
// may use (default 64 MiB); see the package doc for what it covers.
// Badger's memtables and caches are read from the DB's options (open it
// with BadgerOptions(dir, bytes) to size them from the same budget); two
// write-behind batches are reserved; the rest holds the cache, the keys
// changed since the last cut and a pending cut's copy-on-write states.
func WithMemoryBudget(bytes int64) Option { return func(c *config) { c.budget = bytes } }

// WithDBShare says the DB is shared by n runtimes (one per partition,
// each under its own prefix, each given its part of the budget): each
// counts 1/n of Badger's memtables and caches. Default 1.
func WithDBShare(n int) Option { return func(c *config) { c.dbShare = n } }

// WithEntryBytes sets the memory one cached key costs (default: measured
// at construction by building instances of the graph, plus map overhead).
// Set it for operators whose state grows after construction.
func WithEntryBytes(n int) Option { return func(c *config) { c.entryBytes = n } }

// WithWriteBatchBytes sets the size at which the write-behind buffer is
// handed to the flusher as one Badger WriteBatch (default 4 MiB).
func WithWriteBatchBytes(n int) Option { return func(c *config) { c.writeBatchBytes = n } }

// WithPieceBytes sets the approximate size of a checkpoint piece (default
// 1 MiB).
func WithPieceBytes(n int) Option { return func(c *config) { c.pieceBytes = n } }

// WithPrefix sets the Badger key prefix of the runtime's keys (default
// "keyedstate/"). Give each runtime sharing a DB its own prefix; Restore
// drops everything under it.
func WithPrefix(p []byte) Option {
	return func(c *config) { c.prefix = append([]byte(nil), p...) }
}

// WithSaveChunk sets how many keys a checkpoint save reads per hold of the
// runtime's lock (default 256): smaller means shorter hot-path pauses
// during a save, larger means fewer of them.
func WithSaveChunk(keys int) Option { return func(c *config) { c.chunkKeys = keys } }
