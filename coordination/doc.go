// Package coordination is the coordination-store contract (six primitives
// over a durable and an ephemeral keyspace), its backends, and the
// split/lease protocol workers use to share broker-less units of work.
//
// Status: not built yet (see the coordination issue).
package coordination
