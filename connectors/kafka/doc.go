// Package kafka connects tflo to Apache Kafka with franz-go (kgo): a
// consumer-group [Source] that hands the partitions it owns to a runtime,
// the [ShardRouter] that the group's assign/revoke callbacks drive, a
// [GroupCursorStore] whose cursor stage is the group's offset commit, an
// idempotent [Publisher] with a bounded buffer, the [OutputSink] that
// publishes a pipeline's outputs (the one streaming.Sink contract), the
// versioned [Envelope] for streaming.Signal, dead letters, and [Security]
// (TLS, SASL PLAIN and SCRAM).
//
// # Main types
//
//   - [Source]: one consumer-group member. It joins with the
//     cooperative-sticky balancer and auto-commit disabled, and runs one
//     goroutine per owned partition that hands the partition's fetched
//     batches to the runtime's [PartitionHandler] ([Partitions], package
//     pipeline's runtime in tflo). It keeps no state: the runtime restores
//     a partition when it is opened (and says where to resume), checkpoints
//     it, and takes its final checkpoint when it is released. Offsets are
//     committed only by a checkpoint's cursor stage ([Assignment.Cursors]).
//   - [ShardRouter]: a streaming.ShardRouter keyed by [Partition]
//     (topic and partition). Its epoch is derived from the group generation
//     (generation<<32, then +1 per change), so it strictly increases on one
//     member and an owner in a later generation always has a larger epoch
//     than the zombie it replaced.
//   - [Publisher]: an idempotent producer (franz-go's default) whose
//     bounded buffer blocks the caller when full, and whose Flush waits for
//     the records published before it — never for a buffer a saturated
//     producer keeps refilling, so a checkpoint's pre-commit ends in
//     bounded time.
//   - [OutputSink]: a pipeline's outputs as records, encoded by an
//     [OutputEncoder] ([JSONOutputs], [SignalEnvelopes]).
//   - [Envelope] / [EncodeSignal] / [DecodeSignal]: the versioned JSON
//     event envelope of a streaming.Signal; [DecodeSignalFields] reads
//     its key, ts and the payload fields a graph needs, allocation-free.
//   - [JSONReadingDecoder]: the allocation-free decoder of JSON readings.
//
// # Rebalances
//
// On assign the Source opens each gained partition through the runtime
// before it is fetched ([Partitions.Open]; fetching starts right after the
// offset the restored state ends at, or at the start of the log). On
// revoke the partition's goroutine is stopped (queued batches are dropped
// and counted, never handed over), the runtime releases it with its final
// checkpoint within [WithRevokeTimeout], and only then does the callback
// return and the router drop the partition; on timeout or failure nothing
// is committed and the next owner replays from the last durable
// checkpoint. A lost partition (session expired) is released without a
// final checkpoint. Records that reach a partition goroutine after the
// partition stopped being owned at its epoch are dropped (fencing), and a
// partition gained back while a poll was held is fetched again from its
// restored offset: records polled for an earlier ownership never reach a
// later one.
//
// Liveness: WithSessionTimeout bounds how long a killed member's
// partitions stay idle, WithRebalanceTimeout how long a member killed
// while joining holds up a rebalance (it must exceed WithRevokeTimeout).
// WithInstanceID makes the member static: a restart within the session
// timeout gets its partitions back without a rebalance, a stop does not
// leave the group, and a second live member with the same id stops the
// first with ErrFencedInstance.
//
// # Dead letters
//
// A record the runtime cannot process (it does not decode, it falls
// outside the pipeline's streaming.Limits, its key is over the state's
// cap) is a dead letter: package pipeline writes it, as an Output
// carrying a streaming.DeadLetter, to the pipeline's dead-letter sink,
// through the streaming.Sink contract every sink has. [DeadLetterSink] is
// the Kafka one: it produces the record that came, with headers naming
// the source topic, partition, offset, group and reason ([DeadLetter]),
// and its Flush is part of a checkpoint's pre-commit. The record's own
// tflo-dlq-* headers are dropped so a producer cannot forge them, and a
// dead letter too large for the broker is sent truncated, with the
// original size and SHA-256 in headers ([TruncateDeadLetter],
// [ProduceDeadLetter]), instead of failing the partition's checkpoints. A
// [Publisher] record too large for the broker is dead-lettered the same
// way ([PublisherDeadLetterTopic]) and never fails later publishes; its
// log gets a sample (the first 10 lines of every 10 s, the next one
// carrying suppressed=N).
//
// # Decoding cost
//
// JSON decoding is the known per-event cost. [JSONReadingDecoder] scans
// the common reading shape by hand with no allocation and falls back to
// encoding/json for anything else (nested values, escapes, odd field
// case), so behaviour is encoding/json's (fuzzed for agreement) at about a
// tenth of its cost (BenchmarkDecodeJSON).
//
// Benchmarks: go test -run x -bench . -benchtime 200000x ./connectors/kafka
// (BenchmarkSourceThroughput reports x-bare-consume against a bare group
// consumer measured in the same process).
//
// # Concurrency
//
// Source.Run owns the poll loop; each partition goroutine calls its
// handler's Handle, one batch at a time. The router, Stats, Publisher and
// OutputSink are safe for concurrent use.
package kafka
