// Package statetest is the conformance suite every streaming.StateStore and
// streaming.CursorStore backend runs:
//
//	func TestConformance(t *testing.T) {
//		statetest.Run(t, func(t *testing.T) streaming.StateStore { return open(t) })
//		statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore { return open(t) })
//	}
//
// newStore is called once per subtest and must return a fresh, empty store;
// it registers its own cleanup with t.Cleanup.
//
// What the suite holds a StateStore to: exact round trips of every
// SnapshotMeta field (Load reports Meta.FormatVersion =
// streaming.SnapshotFormatVersion, the version of the encoding that wrote
// it; zero-length byte fields may come back as nil), overwrite, SaveBatch
// (including a key repeated inside one batch: the last item wins), Delete
// (of an absent key too), ListKeys, keys that are binary, empty, empty
// looking, contain slashes, dots, backslashes, case variants or are long,
// values of several MiB, concurrent use from many goroutines, a cancelled
// context (the call fails with an error wrapping ctx.Err() and changes
// nothing), not-found (an error wrapping streaming.ErrNotFound, never a zero
// snapshot with a nil error), and that byte slices are neither retained nor
// shared with the caller.
//
// A CursorStore is held to round trips (the cursor bytes neither retained
// nor shared with the caller), per-key fencing (an older epoch is
// refused with streaming.ErrFenced and changes nothing; the same or a newer
// epoch replaces), not-found, cancellation and concurrent writers.
//
// # Concurrency
//
// Subtests run sequentially; the concurrency subtests start their own
// goroutines and wait for all of them before returning.
package statetest
