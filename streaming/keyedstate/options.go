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
}

func defaultConfig() config {
	return config{
		budget:          64 << 20,
		writeBatchBytes: 4 << 20,
		pieceBytes:      1 << 20,
		prefix:          []byte("keyedstate/"),
		chunkKeys:       256,
	}
}

func (c *config) validate() error {
	if c.budget <= 0 {
		return fmt.Errorf("keyedstate: memory budget %d bytes must be positive", c.budget)
	}
	if c.writeBatchBytes <= 0 {
		return fmt.Errorf("keyedstate: write batch size %d bytes must be positive", c.writeBatchBytes)
	}
	if int64(2*c.writeBatchBytes) >= c.budget {
		return fmt.Errorf("keyedstate: memory budget %d bytes must exceed two write batches (2×%d bytes): one is filled while the other is written", c.budget, c.writeBatchBytes)
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

// WithMemoryBudget sets the bytes the cache and the write-behind buffers
// may use (default 64 MiB). The cache holds (budget − 2 × write batch) /
// entry bytes instances. The set of keys changed since the last cut is
// not counted (about 16 bytes plus the key per changed key).
func WithMemoryBudget(bytes int64) Option { return func(c *config) { c.budget = bytes } }

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
