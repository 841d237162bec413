// Package pipeline is tflo's runtime: it runs any pipeline — a source, a
// decoder, a keyed graph of operators, sinks — on bounded, Badger-backed
// keyed state, with sharding, checkpoints, handoffs, leases, metrics and
// the Temporal slow path.
//
// A pipeline is a Go value ([Pipeline]); a YAML spec decodes into the same
// value ([Load], [Parse]). [Run] runs one in a worker process; [Evaluate]
// runs one in memory over a sequence of messages, for tests.
//
// # Main types
//
//   - [Pipeline]: the job. Its [Source] is a [KafkaSource] (a consumer
//     group: each partition is a shard, owned by one worker at a time) or
//     an [MQTTSource] (one shard, its client id). Its [Decoder] turns a
//     message into a keyed [Record] ([ReadingDecoder], [JSONDecoder],
//     [SignalEnvelopeDecoder], or your own, registered by name or set in
//     Go), and every decoded record is
//     checked against its Limits (streaming.Limits, in its TimeUnit): a
//     message that does not decode or falls outside them is a dead letter
//     (an MQTT source also refuses a sensor id that is not the last level
//     of its topic): dead letters go to the pipeline's DeadLetter sink (a
//     [KafkaSink], or [Use] your own), as Outputs carrying a
//     streaming.DeadLetter, through the same contract as the other sinks.
//     By default a Kafka source's go to its dead-letter topic, and an MQTT
//     source's to its broker's (an mqtt.DeadLetterSink, publishing on the
//     source's own connection). Its [Graph] is
//     nodes of registered operator types ([DefaultRegistry]: streaming/ops
//     and streaming/fintech; register your own types the same way) or a Go
//     *streaming.Graph. Its [SinkSpec]s open the sinks: [KafkaSink],
//     [InfluxSink], [ArchiveSink], or your own streaming.Sink ([Use]) —
//     every sink satisfies the one contract, streaming.Sink. [State] says
//     where the keyed state lives and where checkpoints go; [Checkpoint] is
//     the policy.
//   - [Spec]: the YAML form. Decoding is strict: an unknown key, a
//     repeated key or a mistyped value is refused with its key path and
//     line, every problem of a file at once; an unknown operator, an
//     unknown or mistyped parameter, an unknown input or a cycle names the
//     node and its line ([NodeError]). Defaults are applied after the file
//     and the environment were read. A spec names a decoder or a sink of
//     your own as it names the built-in ones once [RegisterDecoder] or
//     [RegisterSink] registered its type ([DecoderType], [SinkType]); the
//     type's New reads the settings under its name ([Settings.Decode]) as
//     strictly as the rest.
//   - [Worker]: one process running a pipeline ([NewWorker], [Worker.Run]).
//     Deployment settings are [Option]s, not part of the pipeline: the
//     worker id, a Temporal client, a coordination store, the metrics
//     registry, the logger. [Worker.Ready] says whether it serves (its
//     shards held and restored, Temporal and the sinks answering): a
//     worker main's /readyz.
//
// # Metrics
//
// WithMetrics registers, labelled by pipeline: records in and out, dead
// letters, event lag, owned shards; per shard the checkpoint counters,
// failures, age and duration (a histogram), the checkpoint breaker (one
// series per state), the keyed state's keys and memory, and the Kafka
// consumer lag; per InfluxDB sink its points, retries, rejections,
// buffered points and breaker. The collectors of the parts the worker
// opens are registered on the same registry: the S3 checkpoint store's
// requests, the split protocol's and the coordination store's (with
// WithCoordination), the MQTT source's counters, each with the constant
// label pipeline, so workers of several pipelines can share a registry
// (two live workers of one pipeline cannot: NewWorker says so; a closed
// worker's collectors are unregistered).
//
// # State and memory
//
// A worker keeps all its shards' keyed state in one Badger database
// (State.Dir; in memory when empty), each shard under its own prefix, in
// a streaming/keyedstate runtime: the hot keys in a bounded cache, the
// rest in Badger. The memory budget (State.Memory, default 256 MiB) is
// divided evenly among the shards the worker holds, and divided again as
// shards come and go (keyedstate's Runtime.Resize: a shard whose part
// shrinks evicts down to it at once), never more ways than the source has
// partitions; it covers, per shard: the cache of live key instances, the
// keys changed since the last checkpoint, a pending checkpoint's
// copy-on-write states, the write-behind buffers, its share of Badger's
// memtables and pooled compaction buffers (the database is sized from the
// budget), and a third of it left to the garbage collector (the worker
// binary, workers/cmd/worker, runs the process at a Go memory limit of
// the budget plus half of it, at least 128 MiB, unless GOMEMLIMIT is
// set; a program of its own that calls Run sets its own). Badger's share is about 40
// MiB whatever the budget, so the budget is at least MinMemory (80 MiB);
// a worker holding more than 100 shards may need more (a shard the split
// leaves no room for a key refuses to open, naming state.memory). Not covered: Badger's file mappings (the kernel's page
// cache), the records and outputs in flight, and the sinks' own bounded
// buffers.
//
// Hostile keys: a shard holds at most State.MaxKeys keys (a new key over
// the cap is dead-lettered with the reason), State.KeyTTL drops keys
// unseen that long (processing time, swept by one goroutine of Run), and a
// key whose restored state does not load is quarantined — reset, logged
// and counted — instead of failing the shard. A checkpoint of another
// graph is not such a key: a restore whose snapshot records a stateful
// node the graph no longer has, running another operator, or at a type
// version the operator neither is nor migrates from is refused, naming
// each node (streaming.Graph.CheckRestore), and the worker stops with
// that error instead of resetting every key; with
// State.AllowNonRestoredState a removed node's state is dropped instead
// (streaming.WithNonRestoredState). Sinks drop and count an
// output they cannot write (a non-finite value) instead of failing the
// batch.
//
// A checkpoint cuts a shard's state in O(1) between two chunks of
// records and saves only the keys changed since the previous one (O(changed
// keys)), as sorted runs merged once there are too many. A shard gained by
// a worker is restored from the durable store (State.Durable: a shared
// folder, S3, or the worker's own Badger) into Badger, not into memory: a
// state larger than the budget restores, and keys load as they are used.
// There is no second "local copy" of checkpoints: the state lives in the
// worker's Badger already, and the durable store is the one truth a
// restore reads.
//
// # Checkpoints and sinks
//
// A checkpoint of a shard is: cut (the records before it and their
// outputs are one unit: a chunk is applied and its outputs written under
// the shard's lock), pre-commit (every sink's Flush for the shard, the
// dead-letter sink's included: every output of a record the cut contains becomes durable,
// and only those — a sink's Flush waits for what was written before it,
// never for a buffer that keeps filling), save the changed keys and the
// manifest (the commit point), commit the cursor (for Kafka: the group's
// offset commit), then the sinks' Commit notification
// (streaming.SinkCommitter). Sinks that publish exactly once are told
// where each cut falls (streaming.SinkCutMarker, under the shard's lock),
// and a gained shard's sinks what its state was restored from
// (streaming.SinkRestorer, with the checkpoint's cut offset and epoch).
// The archive sink (parquet.Sink) keeps one rolling file per shard: a
// checkpoint makes the rows of its cut durable, its commit publishes the
// files finished by then (and reports the rows and bytes to the round's
// summary), a restore discards what the restored checkpoint did not
// commit, and a shard's final checkpoint finishes its file. With Temporal
// the pipeline's checkpoint coordinator drives the checkpoints in rounds;
// without, the worker checkpoints every interval; a Kafka revoke takes
// the final checkpoint, and so does a graceful stop. Once a shard's
// release begins (a partition's revoke or loss, an MQTT source's stop),
// its final checkpoint is the only one that cuts it: a round's
// checkpoint of it is answered not-owner.
//
// # Control plane
//
// The source reports each gained and released shard to the worker's shard
// host (no polling; an MQTT source's one shard, its client id, is gained
// when it is restored, at a new epoch each run — one past the restored
// checkpoint's and, with WithCoordination, past every epoch claimed for
// the shard in the coordination store (a compare-and-set there, so two
// runs started at once from the same checkpoint differ), so an older run
// still going under the same client id is fenced — and released after its
// final checkpoint): the host registers the shard's checkpointer in its
// activities.Shards (the CheckpointHost of the coordinator's rounds),
// answers the handoff steps (activities.ShardHost) and tells the control
// plane. With Temporal that is the pipeline's checkpoint coordinator
// (workflows.CoordinatorWorkflow, started by the first announcement):
// the worker announces its gained and released shards in batches
// (update-with-start; a stale epoch is refused, and a shard that moved
// between workers gets a HandoffWorkflow whose final checkpoint is a
// one-worker round); each round is one activity on the worker's own queue
// (tflo-worker-<id>) that checkpoints every shard it owns, each committed
// on its own, fenced by its epoch. The coordinator's breaker is the only
// one; the worker's breaker gauge shows its state. A worker that sees no
// round for Checkpoint.MaxCheckpointAge (Temporal unreachable, the
// coordinator stopped, the worker declared gone) checkpoints on its own
// and announces its shards again; the next round reconciles. The Temporal
// client may be lazy: the worker starts its Temporal workers in the
// background, retrying, so it starts and runs while Temporal is down. The
// lease workflow supervises the worker and tells the coordinator when it
// dies; with a coordination store the worker holds a presence lease for
// its id.
//
// # Concurrency
//
// Run owns every goroutine it starts: the source's (the Kafka poll loop
// and one goroutine per owned partition, or the MQTT connection), the
// control plane's, the Temporal workers, the lease supervisor and, with a
// key TTL, the idle-key sweeper. A
// shard's records are applied on its goroutine; checkpoints run on other
// goroutines and stall the hot path only while the cut is marked. Sinks
// are written from the shards' goroutines (concurrently across shards)
// and flushed from checkpoints. A Worker's exported methods are safe for
// concurrent use; a Pipeline value is not modified by Run.
package pipeline
