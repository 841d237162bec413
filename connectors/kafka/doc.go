// Package kafka connects tflo to Apache Kafka with franz-go (kgo): a
// consumer-group [Source] that feeds per-partition keyed graphs, the
// [KafkaShardRouter] that the group's assign/revoke callbacks drive, a
// [GroupCursorStore] whose cursor stage is the group's offset commit, an
// idempotent [Publisher] with a bounded buffer, the versioned [Envelope]
// for streaming.Signal, dead letters, and [Security] (TLS, SASL PLAIN and
// SCRAM).
//
// # Main types
//
//   - [Source]: one consumer-group member. It joins with the
//     cooperative-sticky balancer and auto-commit disabled, runs one
//     processing goroutine per owned partition, decodes each record with a
//     pluggable [Decoder] and applies it to that partition's
//     streaming.Keyed (or hands it to a [Handler]). Offsets are committed
//     only by a checkpoint's cursor stage, after the partition's state
//     snapshot was saved.
//   - [KafkaShardRouter]: a streaming.ShardRouter keyed by [Partition]
//     (topic and partition). Its epoch is derived from the group generation
//     (generation<<32, then +1 per change), so it strictly increases on one
//     member and an owner in a later generation always has a larger epoch
//     than the zombie it replaced.
//   - [Publisher]: an idempotent producer (franz-go's default) keyed by
//     sensor id, whose bounded buffer blocks the caller when full, and
//     whose Flush a checkpoint calls before the cursor is committed.
//   - [Envelope] / [EncodeSignal] / [DecodeSignal]: the versioned JSON
//     event envelope of a streaming.Signal.
//
// # Checkpoints and rebalances
//
// A partition's checkpoint is: cut (on the partition goroutine, between two
// records) → flush sinks and dead letters → save the partition snapshot to
// the local and the durable StateStore (refused when a later owner's
// snapshot is already there) → save the cursor (the group commit). On
// revoke the partition's goroutine is stopped, its final checkpoint runs
// inside the callback under [WithRevokeTimeout], and only then does the
// callback return; on timeout the partition is released without a commit
// and the next owner replays from the last durable snapshot. On assign the
// snapshot with the later cursor of the local and the durable store is
// restored and fetching starts right after its cursor.
//
// # Concurrency
//
// Source.Run owns the poll loop; each partition goroutine owns its Keyed
// and is the only caller of its operators. Checkpoint may be called from any
// goroutine; it asks each partition goroutine for a cut and does the slow
// saves on the caller's goroutine while the hot path keeps running. The
// router, Stats and Publisher are safe for concurrent use.
package kafka
