// Package streaming is the core of tflo: the operator contract, the graph
// runtime that evaluates operators per key, the Flow iterator adapter, typed
// signals, and the durable-state contracts (StateStore, Cursor, ShardRouter)
// that connectors implement and the Checkpointer sequences.
//
// The package does no network I/O and imports nothing but the standard
// library and internal/wire, tflo's byte-format helpers (backends that need
// Badger live in streaming/state/...).
//
// # Main types
//
//   - [Computed]: the value that flows on a graph edge — a float, an int, a
//     bool or a signal carrying a [Mode]. A 16-byte value type; passing it
//     never allocates.
//   - [Operator]: a node of a graph, evaluated once per record of its key.
//     Embed [Base] for the defaults; implement [Migrator] to accept state
//     saved by older type versions.
//   - [Registry] / [OperatorType]: operator types by name, with their
//     parameters (defaults, bounds, docs), inputs, outputs and modes;
//     pipeline specs resolve node types through it (ops.Register and
//     fintech.Register declare the catalogs). Windowed operators take a
//     [Warmup] policy ([WarmupParam]).
//   - [Builder] / [Graph]: operators wired into a DAG by stable names,
//     validated at Build. A Graph is immutable and shared.
//   - [Instance]: one key's live copy of a Graph (its own operators and
//     state). [Keyed] maps keys to instances, creating each on first sight.
//   - [Flow] / [FlowFunc]: adapt an iter.Seq of records through a graph (or a
//     closure) into an iter.Seq of typed [Signal] values.
//
// Bounds on decoded readings live here too: [Limits] (key pattern and
// length, value magnitude, event-time skew) compiles to a [LimitCheck]
// that every connector decoding untrusted bytes applies to each record,
// dead-lettering the ones outside with a [*LimitError]; [QuoteKey]
// shortens a key for messages.
//
// # Why Kafka and MQTT names appear here
//
// The package knows no Kafka or MQTT client, but it owns the checkpoint
// format, and two parts of that format are source positions: the cursor
// encodings [KafkaOffset] / [ParseKafkaOffset] and [MQTTCursor] /
// [ParseMQTTCursor] (tagged [CursorTypeKafka] and [CursorTypeMQTT] in a
// snapshot), and the shard name of a Kafka partition ([KafkaShard],
// [ShardID.KafkaPartition]). They are pure byte formats with no I/O, and
// the readers of a checkpoint (the checkpoint activities, `starter
// pipeline status`, the archive sink naming its files) must decode them
// without linking franz-go or paho; in connectors/kafka and
// connectors/mqtt they would pull those clients into every reader. The
// clients themselves stay in the connectors.
//
// # Concurrency
//
// A Graph is safe for concurrent use. An Instance and a Keyed are not: each
// is owned by one goroutine (one per shard), which is also how the hot path
// avoids locks. Operators are called from that goroutine only.
package streaming
