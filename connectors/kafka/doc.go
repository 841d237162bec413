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
// Each owned partition has a streaming.Checkpointer (package streaming's
// one sequencer of snapshot → state save → cursor save) over the durable
// StateStore, and a second one over the local store when
// WithLocalStateStore is set. A partition's checkpoint is: cut (on the
// partition goroutine, between two records: the keys changed since that
// store's last saved cut, encoded) → flush sinks and dead letters → save
// the pieces and the manifest (refused, wrapping streaming.ErrFenced, when
// the stored manifest has a later owner's epoch) → save the cursor, which
// by default is the group offset commit ([GroupCursorStore]; the broker
// fences a member that left the generation). Checkpoints run when
// Checkpoint is called, each WithCheckpointInterval, through Checkpointer
// (stage by stage, for the Temporal checkpoint workflow), and on revoke.
//
// On revoke the partition's goroutine is stopped (queued records are
// dropped and counted, never applied), its final checkpoint runs inside the
// callback under [WithRevokeTimeout], and only then does the callback
// return and the router drop the partition; on timeout or failure the
// partition is released without a commit and the next owner replays from
// the last durable checkpoint. A lost partition (session expired) only
// refreshes the local copy. On assign the checkpoint with the later cursor
// of the local and the durable store is restored (the local one on a tie)
// and fetching starts right after its cursor; with no checkpoint it starts
// at the beginning of the log. The group's committed offset is only a lag
// marker: the checkpoint is the truth.
//
// # Bad records
//
// Every decoded record is checked against the source's [WithLimits]
// (streaming.Limits: key pattern and length, magnitude of float inputs,
// ts skew and range — the same check the MQTT source applies), whatever
// the decoder. A record that fails to decode or falls outside them goes
// to the dead-letter topic with headers naming its source and the reason
// ([DeadLetter]); the record's own tflo-dlq-* headers are dropped so a
// producer cannot forge them, and a dead letter too large for the broker
// is sent truncated, with the original size and SHA-256 in headers
// ([TruncateDeadLetter]), instead of failing the partition's checkpoints.
// A [Publisher] record too large for the broker is dead-lettered the same
// way and never fails later publishes.
//
// # Decoding cost
//
// JSON decoding is the known per-event cost. [JSONReadingDecoder] scans
// the common reading shape by hand with no allocation and falls back to
// encoding/json for anything else (nested values, escapes, odd field
// case), so behaviour is encoding/json's (fuzzed for agreement) at about a
// tenth of its cost (BenchmarkDecodeJSON). A binary codec would save the
// rest but needs every producer to change; the decoder is pluggable
// ([Decoder]) for that.
//
// Benchmarks: go test -run x -bench . -benchtime 200000x ./connectors/kafka
// (BenchmarkSourceThroughput reports x-bare-consume against a bare group
// consumer measured in the same process, BenchmarkApply the hot-path CPU
// per record).
//
// # Concurrency
//
// Source.Run owns the poll loop; each partition goroutine owns its Keyed
// and is the only caller of its operators. Checkpoint may be called from any
// goroutine; it asks each partition goroutine for a cut and does the slow
// saves on the caller's goroutine while the hot path keeps running. The
// router, Stats and Publisher are safe for concurrent use.
package kafka
