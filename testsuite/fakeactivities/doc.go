// Package fakeactivities registers stand-ins for tflo's activities on a
// real Temporal worker, under the names the workflows call, so workflow
// and CLI tests can run against a real dev server without shard state,
// archives or sinks. The stand-ins return plausible, deterministic values.
//
// MemoryShards is the in-memory worker side of the checkpoint
// coordinator's rounds (not for production): N fake shards with real
// streaming.Checkpointers over one store, split among workers whose
// activities.Shards hosts run the real Rounds activity — what the
// coordinator's dev-server tests and benchmarks use.
//
// Concurrency: Stages and MemoryShards values are safe for concurrent use.
package fakeactivities
