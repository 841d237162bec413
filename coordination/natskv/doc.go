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
//   - an existing ephemeral bucket whose TTL differs from the configured
//     lease, or that has no limit markers (expiry would be invisible).
//
// Keys map one-to-one to KV keys (coordination.ValidKey keys are valid NATS
// subject tokens); a prefix "a.b." watches the subject filter "a.b.>".
//
// Known limits: an Update whose expected revision is that of the key's
// delete or expiry marker succeeds (JetStream's expected-last-sequence check
// cannot tell a marker from a value), so consumers must pass revisions of
// values, as the split protocol does. Create on a key that has a marker
// costs three round trips (try, read the marker, retry at its revision).
//
// Concurrency: a Store is safe for concurrent use. Each Watcher owns one
// goroutine that translates the KV watcher's updates; it also ends the watch
// with a Retryable error when the connection drops, so consumers re-watch
// and reconcile instead of trusting a stream that may have missed events.
package natskv
