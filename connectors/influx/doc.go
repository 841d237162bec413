// Package influx is tflo's InfluxDB sink: derived signals written as line
// protocol through the v2 write API with github.com/influxdata/influxdb-client-go/v2.
//
// # Main types
//
//   - [Point]: one derived signal — measurement, tags sensor and mode,
//     fields, nanosecond timestamp. [AppendLine] encodes it
//     deterministically, so a replayed record produces the same series and
//     timestamp and overwrites its point instead of duplicating it.
//   - [Sink]: batches points (size and interval), sends each batch with the
//     client's blocking write API, retries 5xx/429/transport errors with
//     backoff behind a circuit breaker (streaming.Breaker), and applies
//     back-pressure through a bounded buffer when the server is down.
//     Wrong credentials (401/403) fail the sink at once with a
//     [*WriteError] naming the endpoint and the status — no retry storm.
//
// # Points that cannot be written
//
// [AppendLine] refuses, with a [*PointError] wrapping [ErrPointRefused], a
// point InfluxDB would refuse or read back as something else: a
// non-finite float, a measurement, tag or field key that is not printable
// UTF-8 (a newline, a tab) or holds a backslash the line protocol cannot
// carry (at its end, or before a backslash, ',', ' ', '=' or '"'), a
// timestamp outside InfluxDB's range, a series key over 64 KiB. [Sink.Write]
// refuses such a point on its own — counted in Stats.Refused, logged and
// passed to [WithOnRefuse] — and writes the rest: one bad point never
// costs the batch it would have been in (the server refuses a whole
// request for one malformed line) nor fails a checkpoint. The encoder is
// fuzzed against InfluxDB 1.8's own parser in the separate module
// connectors/influx/lpcheck (see its doc for why it is separate).
//
// # InfluxDB 2.x and 1.8+
//
// Both speak the v2 write API (/api/v2/write); they differ in how the
// target and the credentials are named:
//
//	                 InfluxDB 2.x            InfluxDB 1.8+
//	bucket           bucket name             "database/retention-policy" ("db/autogen")
//	org (WithOrg)    organization            "" (leave empty)
//	token            API token (WithToken)   "user:password" (WithUserPassword), or none without auth
//
// On 1.8 the database must exist first (CREATE DATABASE). 1.8 must run
// with flux-enabled = true only for Flux queries, not for writes.
//
// # Security
//
// Tokens and passwords come from options or the environment
// ([WithTokenFromEnv]) and never appear in logs or errors: errors name the
// endpoint without user info. [WithTLS] sets a custom CA or client
// certificates for https endpoints.
//
// # Concurrency
//
// A Sink is safe for concurrent use. It owns one sender goroutine, started
// by [NewSink] and ended by [Sink.Close] (which drains first, bounded by
// its ctx). [Sink.Flush] waits until every point written before it is
// acknowledged: call it before committing a checkpoint's cursor, so that
// committed offsets are in InfluxDB.
package influx
