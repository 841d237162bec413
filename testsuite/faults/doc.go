// Package faults wraps state and cursor stores with injected faults for
// tests of the durable-write path: a store that fails, one that hangs until
// its caller's deadline, and one that "crashes" — from a chosen write on,
// every write is refused and nothing is applied, as if the process had died
// at that point (optionally after applying part of the batch it was
// writing, like a store that is not atomic across a batch).
//
// # Main types
//
//   - [Store]: a streaming.StateStore and streaming.CursorStore that
//     forwards to real stores until a rule says otherwise (and a
//     streaming.ConditionalSaver when the state store is one).
//   - [Net]: a dialer (for Kafka and Temporal clients) that cuts a
//     process off the network as if its machine died, and heals.
//
// # Concurrency
//
// A Store is safe for concurrent use; its rules may be changed while
// other goroutines call it.
package faults
