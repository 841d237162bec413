// Package activities adapts tflo's streaming, coordination and connector
// packages to Temporal activities. It is the only place where errors are
// classified as retryable, non-retryable or benign for Temporal.
//
// Activities are methods on structs holding their dependencies; workers
// register the structs and workflows call the methods by reference.
// Activities that touch a worker's in-process state run on that worker's
// own task queue and carry the owner epoch they were scheduled for; a
// worker that no longer owns the shard at that epoch refuses.
//
// Main types:
//   - CheckpointHost: the worker side of the checkpoint coordinator's
//     rounds (one round per worker, one result per shard, notices of the
//     coordinator's breaker). Shards implements it over
//     streaming.Checkpointers (writes batched with
//     streaming.CheckpointGroup, local checkpoints when rounds stop coming:
//     RunLocal); the pipeline runtime's shard host registers its Shards with
//     Rounds, and the in-memory one for tests and benchmarks is
//     testsuite/fakeactivities.MemoryShards.
//   - Rounds: the round activity over a CheckpointHost.
//   - Handoffs, Leases: the handoff and lease steps over a ShardHost.
//   - Backfills: archive listing and replay.
//   - Duration: durations that read as text in workflow inputs and results.
//
// Concurrency: every exported type is safe for concurrent use.
package activities
