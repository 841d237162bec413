// Package mqtt is the MQTT v5 source of tflo: sensor readings from a
// broker (github.com/eclipse/paho.golang autopaho) into a handler — in the
// reference deployment, the edge gateway's per-sensor graph.
//
// # Main types
//
//   - [Source]: one client id, one persistent session (Clean Start false on
//     reconnects and on restart unless WithCleanStart, session expiry one
//     hour by default), QoS 2 subscriptions, optionally shared
//     ($share/<group>/<filter>, WithSharedGroup) so several gateways split
//     one stream. Reconnects with exponential backoff and jitter.
//   - [Reading] / [DecodeReading]: the JSON payload
//     {"sensor":"...","ts":...,"value":...}; ts is Unix milliseconds or an
//     RFC 3339 string.
//   - [Handler]: the callback each message is handed to.
//
// # Processing order and guarantees
//
// For every PUBLISH, in receive order:
//
//  1. Dedup (QoS 1 and 2): the (packet id, FNV-1a digest of topic and
//     payload) pair is looked up in the cursor's bounded window. A hit is a
//     redelivery — the broker resent a message this source already
//     handled, for example after a reconnect that lost the PUBCOMP, or
//     after a restart from a checkpoint — and is acknowledged without
//     calling the handler. The digest is what tells a redelivery from a
//     new message that reuses a freed packet id.
//  2. Decode and check. A payload the decoder refuses, a reading outside
//     the source's limits ([WithLimits], streaming.Limits: key pattern and
//     length, value magnitude, ts skew — the same check a pipeline applies
//     to its Kafka records) or, by default, whose sensor id is not the
//     last level of its topic ([WithRequireTopicMatch]: a client the
//     broker lets publish only on sensors/dev1 cannot write another
//     sensor's state) is
//     published (QoS 1, on the source's connection, waiting for the
//     PUBACK) to the dead-letter topic with the message's user properties
//     and tflo-reason, tflo-source-topic and tflo-packet-id — the
//     source's, never the publisher's: forged ones are dropped — (or
//     handed to [WithDeadLetters]'s function: a pipeline's dead-letter
//     sink, by default the source's [DeadLetterSink], which publishes the
//     same way). A dead letter lost with the connection leaves its
//     message unacknowledged, and the broker redelivers it after the
//     reconnect (one whose PUBACK does not come within the connect
//     timeout drops the connection, which may still be up: the
//     acknowledgements of the messages after it would wait behind it).
//     The DeadLettered counter rises (the
//     log gets a sample: the first 10 lines of every 10 s, the next one
//     carrying suppressed=N), and the stream continues. Only checked readings reach the handler, the
//     retained-topic sequences and Stats.NewestTS. A retained message
//     dead-lettered (here or by the handler's ErrRefused) is remembered
//     in the topic map by its topic and payload digest: the copy the
//     broker re-sends on every subscribe, under a new packet id, is
//     skipped (RetainedSkipped), not dead-lettered again.
//  3. Retained: a message delivered because it was retained (a new
//     subscription, typically after a reconnect) whose ts is not newer
//     than the last one processed on its topic is skipped.
//  4. The handler runs. On success the message enters the window, its
//     topic's sequence advances, and it is acknowledged (PUBREC for QoS 2);
//     acknowledgements are sent in receive order. On error Run stops and
//     the message stays unacknowledged, so the broker redelivers it.
//
// The window and the topic map have fixed capacities (WithDedupCapacity);
// the oldest entries are evicted first, so a redelivery arriving after
// more than window-capacity newer messages is processed again. Memory
// stays flat under any flood of distinct ids.
//
// The broker may have at most WithReceiveMaximum unacknowledged messages
// in flight to the source: a slow handler slows the broker, no queue grows
// in between.
//
// # Payload codec
//
// JSON only. Measured on the reference machine (BenchmarkDecodeReading,
// BenchmarkDecodeBinaryCandidate, BenchmarkReceive in one run): decoding a
// JSON reading costs 0.8–1 µs and 10 allocations, about 2% of the ~40 µs
// a QoS 2 message costs to cross the broker into the handler; a compact
// binary form decodes in ~12 ns but would save about 2% end to end, so it
// is not offered. WithDecoder takes any other codec (WithTopicDecoder one
// that also reads the topic).
//
// # Security
//
// TLS with custom roots and client certificates ([WithTLS])
// and user name/password ([WithCredentials], [WithCredentialsFromEnv]).
// The password is never logged nor put in an error. CONNECT announces a
// Maximum Packet Size ([WithMaxPacketSize], 64 KiB by default), so the
// broker never delivers an oversized payload (a megabyte-long sensor id)
// to the source. A CONNACK refusing
// the credentials ends Run with a [*ConnectError] wrapping
// [ErrBadCredentials] after the first attempt: no reconnect storm.
//
// # Concurrency
//
// Run owns the connection's goroutines and blocks until they have
// stopped. The handler is called from one goroutine, one message at a
// time; [Source.Cut] runs a function between two messages (for
// checkpoints). Stats and Cut are safe to call from any goroutine.
package mqtt
