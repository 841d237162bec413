// Package central is the library half of iot-portal's central worker: one
// Kafka consumer-group member that turns the readings (or the edge
// gateway's signals) of the partitions it owns into derived signals per
// sensor, writes them to InfluxDB and the Parquet archive, and serves the
// Temporal slow path of its shards.
//
// # Main types
//
//   - [Config]: the serializable configuration (json/yaml tags, Validate,
//     defaults), with [TemporalConfig] for the Temporal client (address,
//     namespace, TLS files, API key).
//   - [Worker]: New validates and builds; Run blocks until ctx ends or a
//     fatal error; Close stops Run. It wires a connectors/kafka Source
//     (per-partition keyed graph, Badger state, dead letters) → derived
//     signals ([Graph]: rolling mean/min/max and alarm episodes with their
//     durations, [Episode] being a small custom operator) → [Sink]s
//     (connectors/influx and connectors/parquet, flushed by every
//     checkpoint before state is saved) → one streaming.Checkpointer per
//     owned partition, registered in an activities.Shards registry → a
//     Temporal worker on workflows.WorkerTaskQueue(WorkerID) serving the
//     checkpoint, handoff and lease activities, and optionally a second
//     Temporal worker on workflows.ControlTaskQueue running the workflows.
//   - [Host]: the worker's activities.ShardHost. It follows the Kafka
//     router: when the member gains a partition it registers the
//     partition's Checkpointer, tells the shard's CheckpointWorkflow and
//     HandoffWorkflow who owns it now (signal-with-start of
//     workflows.SignalOwner with the worker's task queue and epoch); when
//     it loses one it unregisters it and remembers its last checkpoint for
//     the handoff's final-checkpoint step.
//
// # Ownership and checkpoints
//
// Ownership is decided by the Kafka group protocol, never by a workflow:
// the Source restores a partition from its newest durable checkpoint
// before it consumes it, and runs the final checkpoint of a revoked
// partition inside the revoke callback. The handoff workflow therefore
// verifies and reports a move rather than performing it: Restore reports
// what the Source restored at the announced epoch, Resume checks the
// partition is being consumed at that epoch, FinalCheckpoint returns the
// checkpoint the revoke took (or takes one if the shard is still held).
// With Temporal configured, checkpoints are driven by each shard's
// CheckpointWorkflow (snapshot → save → commit as activities on this
// worker's queue); without it, Run checkpoints every
// Config.Checkpoint.Interval in process.
//
// # Leases
//
// With a coordination store (Config.Coordination.NATSURL, or
// WithCoordinationStore) the worker registers its id there through the
// split/lease protocol (coordination/split) before it serves anything: a
// second live process with the same id is refused (split.ErrDuplicateWorker)
// and the presence lease is renewed every TTL/3 by the split worker's own
// goroutine, independent of Temporal. The lease activity (KeepLeases, on
// this worker's queue) polls Worker.Err, which reports the Kafka source's
// failure or leases that expired (no renewal landed for a TTL); the lease
// workflow then restarts the activity. Its heartbeats carry the held
// shards and reach the server every third of the heartbeat timeout, so a
// Temporal outage shorter than about two thirds of it goes unnoticed. A
// longer one makes the lease workflow declare the live worker dead and
// start handoffs of its shards; the worker then starts a new lease
// workflow and answers those handoffs as the owner at the same epoch, so
// they end without moving anything (HandoffState.Unmoved). The worker's
// Kafka partitions themselves are owned through the group protocol, not
// through coordination leases.
//
// # Shutdown
//
// Cancelling Run's context (or Close) is the graceful path: the Source
// leaves the group (each owned partition's final checkpoint runs in the
// revoke callback, after the sinks are flushed), the sinks are closed,
// then the Temporal workers stop (the lease activity returns, so the lease
// workflow ends as "stopped" rather than handing shards off), and last the
// presence lease is withdrawn. A process
// that dies instead stops heartbeating: its lease workflow times out and
// starts the handoffs of the shards of its last heartbeat.
//
// # Tests and benchmarks
//
// The tests run against a real Temporal dev server (testsuite/temporaltest)
// and kfake: go test -race ./workers/central/. Benchmarks, each with its
// baseline measured in the same run:
//
//	go test -run '^$' -bench CheckpointRoundTrip -benchtime 20x ./workers/central/
//	go test -run '^$' -bench HotPath ./workers/central/   # 10M records, 5 paired runs
//
// # Concurrency
//
// Run owns every goroutine it starts: the Source's poll loop and partition
// goroutines, the host's watch loop, and the Temporal workers. Sinks are
// written from partition goroutines (concurrently across partitions) and
// flushed from checkpoint goroutines; the built-in sinks lock accordingly.
// Worker's exported methods are safe for concurrent use.
package central
