// Package memstore is the in-memory reference implementation of
// coordination.Store, for tests and single-process demos — not for
// production (nothing is persisted and nothing is shared between
// processes).
//
// Revisions come from one counter shared by both keyspaces; every write,
// delete and expiry draws its revision and publishes its watch event under
// one lock, so a racing re-create can never get a revision below a concurrent
// delete's, and every watcher sees one key's history in revision order.
// Ephemeral keys expire LeaseTTL after their last write on the injected
// clock (WithClock; a vclock.Clock in tests): expiry is applied by a clock
// timer and, lazily, by any operation that touches the key.
//
// Fault injection for protocol tests: SetAvailable(false) makes every call
// fail with a Retryable error and breaks every watch (while keys keep
// expiring, as they would on a real store the workers cannot reach), and
// BreakWatches ends every open watch with a Retryable error.
//
// Concurrency: a Store is safe for concurrent use. Each Watcher owns one
// goroutine that moves events from an in-memory queue to its Events channel;
// Close or the Watch context stops it.
package memstore
