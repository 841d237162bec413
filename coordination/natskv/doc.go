// Package natskv is the NATS JetStream KV backend of coordination.Store.
//
// One job uses two buckets: "<job>_durable" (History 1, no expiry) and
// "<job>_ephemeral", whose bucket TTL (stream MaxAge) is the lease TTL. The
// age limit applies to each message, so every rewrite of a key re-arms its
// clock; with LimitMarkerTTL set the server leaves a "MaxAge" marker when a
// key ages out, which watchers receive as a purge and this package turns
// into an EventDelete carrying the marker's sequence as its revision.
// Revisions are stream sequences, so they strictly increase per key.
//
// Open refuses, with errors wrapping coordination.ErrFatal:
//   - a server whose JetStream API level is below 1 (nats-server older than
//     2.11.0), which cannot keep limit markers or per-message TTLs;
//   - an existing durable bucket with a TTL (its records would expire);
//   - an existing ephemeral bucket whose TTL differs from the configured
//     lease, whose limit marker TTL differs from one set with
//     WithLimitMarkerTTL, or that has no limit markers (expiry would be
//     invisible).
//
// Keys map one-to-one to KV keys (coordination.ValidKey keys are valid NATS
// subject tokens); a prefix "a.b." watches the subject filter "a.b.>".
//
// JetStream's expected-last-sequence check cannot tell a delete or expiry
// marker from a value, so Update reads the message at the expected revision
// first and loses when it is a marker; otherwise an update at a marker's
// revision would bring the key back. The read is skipped for revisions the
// Store has seen carry a value (its own writes, Get, List, Watch), so a
// lease renewed at the revision of its last write costs one round trip.
//
// nats.go ends a watch's snapshot by counting messages, which concurrent
// writes throw off. A Watch here sends SnapshotDone, and List returns, only
// once a message of every key the bucket held when they began has arrived
// (the replay type), so a snapshot never misses a live key and a listing
// never holds one twice; a watch forwards the delete of every key it has
// already sent, also before SnapshotDone.
//
// Limits: a value may be at most MaxValueSize bytes (the server's
// max_payload, 1 MiB by default, less 1 KiB for headers); Create and Update
// refuse a larger one with a Fatal error. Create on a key that has a marker
// costs three round trips (try, read the marker, retry at its revision).
//
// Concurrency: a Store is safe for concurrent use. Each Watcher owns one
// goroutine that translates the KV watcher's updates; it also ends the watch
// with a Retryable error when the connection drops, so consumers re-watch
// and reconcile instead of trusting a stream that may have missed events.
package natskv
