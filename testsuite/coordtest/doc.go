// Package coordtest is the conformance suite every coordination.Store
// backend runs: Run(t, newHarness) checks each note of the store contract
// (revisions, CAS outcomes, vacuous deletes, snapshot-then-live watches,
// listings, ephemeral expiry and re-arming, error kinds, concurrency).
//
// Expiry is driven through the Harness: a backend on a virtual clock
// advances it; a backend on real time waits for real time to pass (use a
// short lease TTL). Every check that waits for an event waits on a
// condition with a deadline.
//
// Concurrency: Run starts one fresh store per subtest and runs subtests
// sequentially; the stores it gets are used from several goroutines.
package coordtest
