// Package edge is the edge leg of the reference deployment as a library:
// MQTT sensor readings → one conditioning graph per sensor (SMA smoothing →
// hysteresis → confirmed threshold cross, from streaming/ops) → typed
// alarm signals → Kafka, keyed by sensor id, with its own checkpoints whose
// cursor is the MQTT source's streaming.MqttCursor. The gateway's main
// (another issue) wires configuration to [New] and calls [Pipeline.Run].
//
// # Main types
//
//   - [Pipeline]: owns the graph instances and runs the source, the
//     periodic checkpoints and the publishing.
//   - [Signal] = streaming.Signal[[Mode], [Payload]]: what goes to Kafka, in
//     connectors/kafka's versioned envelope; Mode is Raised or Cleared.
//
// # Checkpoints
//
// Pipeline implements streaming.CheckpointSource for a streaming.Checkpointer
// (one shard named by WithShard). A cut is taken between two MQTT messages
// (mqtt.Source.Cut): it copies the state blobs of the sensors changed since
// the previous saved cut together with the MQTT cursor. Saving a cut first
// flushes the Kafka publisher, so every signal derived from a record the
// state contains is durable before that state is. Restore loads the newest
// checkpoint's state and cursor before the source connects, so a
// redelivered message the checkpoint already contains is dropped by the
// dedup window instead of being applied twice.
//
// Delivery: MQTT has no replay, so what a crash loses depends on when
// messages are acknowledged. With mqtt.WithAckOnCheckpoint on the source
// (recommended), a message is acknowledged only once a checkpoint that
// contains it is saved: after a crash the broker redelivers everything the
// restored state lacks and the restored dedup window drops everything it
// has — every reading affects state exactly once. Signals derived from
// redelivered readings may be published again (at least once; consumers
// key them by sensor and ts). Without it, messages are acknowledged when
// handled and a crash loses, from state, those handled after the last
// checkpoint (never applies one twice).
//
// # Memory
//
// Every sensor's graph instance stays in memory (a few hundred bytes for
// the default graph), so memory grows with the number of distinct sensors
// a gateway sees, not with the number of readings; a cut holds one blob
// per sensor changed since the last saved cut. Signals wait in the Kafka
// publisher's bounded buffer; with mqtt.WithAckOnCheckpoint at most the
// source's receive maximum of messages await their checkpoint.
//
// # Concurrency
//
// Run owns every goroutine it starts and returns when they have stopped.
// The graph instances are touched only by the source's handler goroutine
// and by Cut, which runs between two messages under the source's lock.
// Checkpoint may be called from any goroutine.
package edge
