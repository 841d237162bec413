package streaming

import (
	"context"
	"slices"
	"sync"
)

// Output is one value a graph output emitted for one input record, with
// where the record came from. It is the one shape every sink receives:
// Kafka topics, InfluxDB, the Parquet archive, a backfill's replay and a
// user's own sink.
type Output struct {
	// Shard and Epoch: the shard the record belongs to and the owner epoch
	// it was processed at.
	Shard ShardID
	Epoch Epoch
	// Offset is the record's position in its shard: the Kafka offset, or
	// for a source without offsets (MQTT) the record's sequence number in
	// the worker's run, which tells the outputs of one record from the
	// next one's; -1 on an MQTT dead letter.
	Offset int64
	// Topic is where the record came from (its Kafka or MQTT topic).
	Topic string
	// Key is the record's key: the graph instance it ran through (a
	// sensor id, a symbol).
	Key string
	// Name is the graph output's name: an Influx measurement, the
	// archive's signal column.
	Name string
	// TS is the record's event time in Unix nanoseconds.
	TS int64
	// Value is the output's value (Computed.Float64) and Mode its mode (0
	// for a plain value).
	Value float64
	Mode  Mode
	// Dead is set on a dead letter: a record the pipeline could not
	// process (see DeadLetter), which goes to the pipeline's dead-letter
	// sink and to no other. Name, Value and Mode are then zero, Key is the
	// record's key as it came (empty for MQTT) and TS its timestamp (for
	// MQTT, when it arrived).
	Dead *DeadLetter
}

// DeadLetter is a record a pipeline could not process, as it arrived,
// and why: the Output that carries it (Output.Dead) gives its shard,
// epoch, offset, topic and timestamp. Dead letters are at least once: a
// shard replayed from its last checkpoint sends its bad records again,
// so a reader dedupes on (topic, shard, offset) where the source gives
// offsets (Kafka); an MQTT source's dead letters have offset -1 and no
// such identity.
type DeadLetter struct {
	// Key and Value are the record's, as they came.
	Key, Value []byte
	// Headers are the record's own (Kafka's record headers).
	Headers []Header
	// Partition is the record's Kafka partition (-1 for other sources).
	Partition int32
	// Group is the consumer group that read it (an MQTT source's client
	// id).
	Group string
	// PacketID is the MQTT message's packet id (0 for QoS 0 and other
	// sources).
	PacketID uint16
	// Err is why the record could not be processed (a decode error, a
	// limit, a key over state.max_keys).
	Err error
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Sink receives a pipeline's outputs. It is the one contract of every
// output destination; checkpoints drive it in two phases.
//
// Write is called on a shard's goroutine with the outputs of one or more
// records of that shard, in record order (concurrently for different
// shards); outs is only valid during the call. Write may block while the
// sink's bounded buffer is full: back-pressure slows that shard. ctx ends
// when the shard is being released or its source stops: a Write waiting
// for room should then give up and return ctx's error, leaving what it
// buffered before buffered (the shard takes no checkpoint after such a
// Write; its records are replayed from the last one). Any other error
// is remembered by the sink and returned by the next Flush, so the
// checkpoint fails and the cursor does not move past lost outputs.
//
// Flush is the pre-commit of checkpoint id of shard, called after the
// checkpoint's cut and before its state is saved: when it returns nil,
// every output of shard written before the call is durable (it may not be
// visible yet, see SinkCommitter). It must wait only for what was written
// before the call, never for a buffer that keeps filling meanwhile, so a
// checkpoint completes in bounded time however busy the shard is. Shard
// "" and id 0 (a backfill, a shutdown) mean every output written so far.
//
// Close flushes and releases the sink; it is called once, after the last
// Write.
type Sink interface {
	Write(ctx context.Context, outs []Output) error
	Flush(ctx context.Context, shard ShardID, id CheckpointID) error
	Close(ctx context.Context) error
}

// SinkCommitter is an optional capability of a Sink that stages what
// Flush made durable (Flink's two-phase commit): Commit is called after
// checkpoint id of shard is committed (its state and cursor are saved)
// and makes the outputs pre-committed up to id visible. It must be
// idempotent and catch up: a Commit may be skipped (a crash between the
// cursor save and the call), the next one then covers both. An error is
// logged and retried at the next checkpoint.
type SinkCommitter interface {
	Commit(ctx context.Context, shard ShardID, id CheckpointID) error
}

// SinkRestorer is an optional capability of a Sink: Restore is called when
// a worker gains shard at epoch, after its state was restored from the
// checkpoint from names (ID 0: nothing stored) and before its first Write,
// so the sink can discard what the restored checkpoint did not commit
// (the records after it are replayed).
type SinkRestorer interface {
	Restore(ctx context.Context, shard ShardID, epoch Epoch, from RestoredCut) error
}

// RestoredCut is the checkpoint a gained shard's state was restored from,
// as a SinkRestorer is told.
type RestoredCut struct {
	// ID is the checkpoint (0: nothing was stored, the shard starts
	// empty).
	ID CheckpointID
	// Epoch is the owner epoch that took the checkpoint (0 with ID 0).
	Epoch Epoch
	// Offset is the source offset of the last record its cut contains
	// (the Kafka offset of its cursor); -1 when it contains none or the
	// source has no offsets.
	Offset int64
}

// SinkCutMarker is an optional capability of a Sink whose pre-commit must
// hold exactly the outputs of the records a checkpoint's cut contains,
// not those written between the cut and the Flush (a sink that publishes
// rows exactly once, such as the Parquet archive). MarkCut is called at
// each checkpoint cut of shard, under the shard's lock (no Write of shard
// runs meanwhile; every output of a record the cut contains was written
// before), with the offset of the last record the cut contains (-1:
// none). The next Flush of shard pre-commits up to the latest mark; a
// mark whose checkpoint never reached Flush is superseded by the next.
type SinkCutMarker interface {
	MarkCut(shard ShardID, offset int64)
}

// MemorySink is a Sink keeping every output in memory, for tests and
// examples; it is not for production (it grows without bound). Safe for
// concurrent use.
type MemorySink struct {
	mu      sync.Mutex
	outs    []Output
	flushes int
	commits map[ShardID]CheckpointID
	closed  bool
}

var (
	_ Sink          = (*MemorySink)(nil)
	_ SinkCommitter = (*MemorySink)(nil)
)

// NewMemorySink returns an empty MemorySink.
func NewMemorySink() *MemorySink { return &MemorySink{commits: map[ShardID]CheckpointID{}} }

// Write appends outs.
func (m *MemorySink) Write(_ context.Context, outs []Output) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrSinkClosed
	}
	m.outs = append(m.outs, outs...)
	return nil
}

// Flush counts the call; everything is "durable" at once.
func (m *MemorySink) Flush(context.Context, ShardID, CheckpointID) error {
	m.mu.Lock()
	m.flushes++
	m.mu.Unlock()
	return nil
}

// Commit records the last committed checkpoint of shard.
func (m *MemorySink) Commit(_ context.Context, shard ShardID, id CheckpointID) error {
	m.mu.Lock()
	m.commits[shard] = max(m.commits[shard], id)
	m.mu.Unlock()
	return nil
}

// Close marks the sink closed; later Writes fail.
func (m *MemorySink) Close(context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// Outputs returns a copy of everything written, in write order.
func (m *MemorySink) Outputs() []Output {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.outs)
}

// Flushes returns how many times Flush was called.
func (m *MemorySink) Flushes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.flushes
}

// Committed returns the last checkpoint of shard Commit was called with.
func (m *MemorySink) Committed(shard ShardID) CheckpointID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits[shard]
}

// ModeNames names the mode of an output's signal, for sinks that write
// modes as text (an Influx tag, a Kafka envelope): ok is false for an
// output whose operator does not name its modes. A pipeline builds it
// from its operators' registered types (OperatorType.Modes).
type ModeNames func(output string, m Mode) (name string, ok bool)
