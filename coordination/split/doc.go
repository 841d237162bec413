// Package split is the split/lease protocol: workers share leasable units
// of work (a Kafka partition group, an MQTT topic group, a range of Parquet
// files for a backfill) through a coordination.Store.
//
// Records. Durable: an immutable Spec per split ("spec.<id>"), a small
// Progress record per split ("prog.<id>": epoch, status, owner, attempts,
// watermark and opaque state written together) and the leader's Plan
// ("plan"). Ephemeral: a Lease per owned split ("lease.<id>"), a Presence
// key per worker ("worker.<id>") and the leader key ("leader").
//
// Claim = create the lease at epoch+1, then CAS the progress record at the
// revision just read. The CAS on the progress record is the only
// correctness mechanism: every commit and ownership change is a CAS at the
// writer's last-seen revision, so a zombie owner's write loses and changes
// nothing. The epoch is the fencing token handed to the source (Tenancy.Epoch)
// and stamped on every snapshot and cursor write.
//
// Liveness. Every TTL/3 the renewal goroutine (its own timer, shared with
// nothing else) rewrites presence, the leader key and every lease. Each
// tenancy has a self-fence timer anchored at the time its last successful
// renewal was sent: when a full lease passes without one, the worker drops
// the split before the store can let anyone else claim it.
//
// Endings. Graceful release (handler returned nil) marks the record
// Released: the next owner consumes no attempt. Cooperative revocation
// (the plan moved the split) closes Tenancy.Revoking — stop intake, commit
// the tail, return — and is forced after the drain deadline. A claim that
// finds the record still Owned (its lease gone) counts a failed tenancy; a
// commit resets the count, so a store outage never quarantines a healthy
// split; after N consecutive failures the split is Quarantined.
//
// Assignment. Assign is a pure, deterministic function (sticky → fill →
// improve, balanced by weight, bounded by per-worker capacity). A leader,
// elected through the ephemeral leader key and fenced by the generation it
// bumps in the plan record, publishes it; a split absent from the plan
// stays with whoever holds it.
//
// Concurrency: see Worker for goroutine ownership. Tenancy methods are safe
// for concurrent use. AddSplits, ResetQuarantine and Inspect are plain calls.
package split
