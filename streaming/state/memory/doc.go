// Package memory is an in-memory streaming.StateStore,
// streaming.CursorStore and streaming.EpochClaimer: the reference
// implementation of those contracts, for tests, examples and
// single-process experiments.
//
// It is NOT for production: everything is lost when the process exits.
// Snapshots are held in their encoded form (streaming.MarshalSnapshot), so
// the store behaves like a durable one — a Load returns a fresh copy with
// FormatVersion set, and a caller mutating a slice after Save changes
// nothing stored.
//
// # Concurrency
//
// A Store is safe for concurrent use; one RWMutex guards it. Methods never
// block on I/O; ctx is checked on entry (and between SaveBatch items), so a
// cancelled context makes the call fail without effect.
package memory
