// Package metered wraps a coordination.Store with a per-operation deadline
// and a duration histogram per operation.
//
// Every call runs under its own deadline (WithTimeout); a call still running
// when it passes returns a Retryable error wrapping ErrTimeout — the outcome
// of a timed-out write is unknown, so callers re-read before relying on it.
// For Watch the deadline bounds establishing the watch only, never its
// lifetime. Durations go to a Prometheus histogram labelled by operation,
// keyspace and result (won, lost, ok, not_found, retryable, fatal).
//
// Concurrency: a Store is safe for concurrent use; a timed-out call's
// goroutine finishes in the background once the inner store returns (the
// inner store also sees the cancelled context).
package metered
