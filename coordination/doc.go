// Package coordination is the coordination-store contract, shared by the
// split/lease protocol (package split) and its backends: memstore (the
// reference, on an injectable Clock), natskv (NATS JetStream KV) and the
// metered wrapper (per-operation deadline and duration histogram). Every
// backend passes testsuite/coordtest.Run; vclock is the virtual Clock tests
// drive expiry with.
//
// The protocol needs exactly six primitives — create-if-absent, CAS update on
// revision, point read, guarded delete, prefix watch and a reconcile listing —
// over two keyspaces: Durable (split records, the plan record; survives owner
// death) and Ephemeral (leases, presence and leader keys; every write re-arms
// a fixed TTL, LeaseTTL, measured on the store's clock). Store is that
// contract, public so deployments can bring their own backend (etcd, Redis)
// beside the built-in memory and NATS JetStream KV stores.
//
// # Contract notes for implementors
//
//   - Revisions are store-assigned and strictly increase per key across its
//     whole write history, deletes included (a bucket-wide sequence does).
//     Revision 0 is never assigned; it means "no revision".
//   - Update on an Ephemeral key re-arms its TTL; expiry surfaces to watchers
//     as a Delete event whose revision is above every earlier revision of the
//     key, and the key then reads as absent.
//   - Losing a precondition (Create on a live key, Update or guarded Delete
//     at a stale revision) is the outcome Lost, never an error. Deleting an
//     absent key wins vacuously (Won with revision 0: nothing was written).
//   - The revision of a delete or an expiry (what Delete returns and what a
//     delete event carries) names no value: an Update expecting it loses,
//     because the key was absent at that revision.
//   - A watch forwards the delete of every key it has sent, also while its
//     snapshot is still arriving; a listing holds each live key once.
//   - A watch delivers a snapshot of live keys, then one SnapshotDone event,
//     then live puts and deletes in revision order per key. A broken watch
//     ends with a Retryable error: consumers re-watch and apply a Put only at
//     a revision above the last one they saw, so replays are idempotent.
//   - List is the loss-proof backstop for missed watch events: a key the
//     consumer believes live but absent from a listing is treated as deleted.
//   - Every error a Store returns wraps ErrRetryable or ErrFatal (see
//     StoreError); Get of an absent key returns an error wrapping ErrNotFound.
//
// Keys are portable when they are dot-separated tokens of [A-Za-z0-9_=-] and
// at most MaxKeyLen bytes (ValidKey); prefixes are empty or end with a dot
// (ValidPrefix). Backends reject anything else with a Fatal error. A backend
// may document a largest value; it refuses a larger one with a Fatal error
// (a retry cannot succeed) and leaves the key as it was.
//
// # Concurrency
//
// A Store is safe for concurrent use by any number of goroutines. Byte slices
// passed in are not retained after the call returns; Entry values returned
// are owned by the caller. A Watcher is owned by a goroutine inside the
// backend that feeds its Events channel; the consumer owns the Watcher and
// must call Close (idempotent) or cancel the Watch context, which stops that
// goroutine and closes Events.
package coordination
