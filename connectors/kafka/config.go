package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Applied describes one record applied by a partition goroutine; see
// WithOnApply. It and everything it points to are only valid during the
// call.
type Applied struct {
	Partition Partition
	Offset    int64
	// Epoch is the router epoch at which this member gained the partition.
	Epoch streaming.Epoch
	Key   string
	TS    int64
	// Instance is the key's graph instance after the record (nil without a
	// graph).
	Instance *streaming.Instance
	Record   *kgo.Record
}

// Flusher is a sink a checkpoint flushes before it saves state, so every
// output of a record the state contains is durable before that state is.
type Flusher interface {
	Flush(ctx context.Context) error
}

// SourceOption configures a Source.
type SourceOption func(*sourceConfig)

type sourceConfig struct {
	brokers        []string
	group          string
	topics         []string
	graph          *streaming.Graph
	decoder        Decoder
	durable        streaming.StateStore
	local          streaming.StateStore
	cursors        streaming.CursorStore
	dlqTopic       func(topic string) string
	revokeTimeout  time.Duration
	restoreTimeout time.Duration
	security       Security
	log            *slog.Logger
	onApply        func(*Applied)
	sinks          []Flusher
	kgoOpts        []kgo.Opt
	cpOpts         []streaming.CheckpointerOption
	queueDepth     int
	maxPoll        int
	pieceBytes     int
	interval       time.Duration
	partitions     Partitions
}

func defaultSourceConfig() sourceConfig {
	return sourceConfig{
		decoder:        JSONReadingDecoder{},
		dlqTopic:       func(t string) string { return t + ".dlq" },
		revokeTimeout:  10 * time.Second,
		restoreTimeout: time.Minute,
		log:            slog.New(slog.DiscardHandler),
		queueDepth:     4,
		maxPoll:        10000,
		pieceBytes:     1 << 20,
	}
}

func (c *sourceConfig) validate() error {
	switch {
	case len(c.brokers) == 0:
		return errors.New("kafka source: no seed brokers (WithBrokers)")
	case c.group == "":
		return errors.New("kafka source: no consumer group (WithGroup)")
	case len(c.topics) == 0:
		return errors.New("kafka source: no topics (WithTopics)")
	case c.partitions != nil && (c.graph != nil || c.onApply != nil || c.durable != nil || len(c.sinks) > 0 || c.interval > 0):
		return errors.New("kafka source: WithPartitions keeps the state outside the Source; WithGraph, WithOnApply, WithStateStore, WithSinks and WithCheckpointInterval do not apply")
	case c.partitions == nil && c.durable == nil:
		return errors.New("kafka source: no durable state store (WithStateStore); use streaming/state/memory for a stateless handler")
	case c.partitions == nil && c.graph == nil && c.onApply == nil:
		return errors.New("kafka source: neither a graph (WithGraph) nor a handler (WithOnApply): records would go nowhere")
	case c.decoder == nil:
		return errors.New("kafka source: nil decoder")
	case c.revokeTimeout <= 0:
		return fmt.Errorf("kafka source: revoke timeout %v must be positive", c.revokeTimeout)
	case c.restoreTimeout <= 0:
		return fmt.Errorf("kafka source: restore timeout %v must be positive", c.restoreTimeout)
	case c.queueDepth < 1:
		return fmt.Errorf("kafka source: partition queue depth %d must be at least 1", c.queueDepth)
	case c.pieceBytes < 1:
		return fmt.Errorf("kafka source: piece size %d must be positive", c.pieceBytes)
	case c.log == nil:
		return errors.New("kafka source: nil logger")
	case c.interval < 0:
		return fmt.Errorf("kafka source: checkpoint interval %v must not be negative", c.interval)
	}
	return c.security.Validate()
}

// WithBrokers sets the seed brokers ("host:port"). Required.
func WithBrokers(addrs ...string) SourceOption {
	return func(c *sourceConfig) { c.brokers = append(c.brokers, addrs...) }
}

// WithGroup sets the consumer group. Required.
func WithGroup(group string) SourceOption { return func(c *sourceConfig) { c.group = group } }

// WithTopics sets the topics to consume. Required.
func WithTopics(topics ...string) SourceOption {
	return func(c *sourceConfig) { c.topics = append(c.topics, topics...) }
}

// WithGraph sets the graph each key of each partition runs (one
// streaming.Keyed per partition). Without it records are only decoded and
// handed to WithOnApply.
func WithGraph(g *streaming.Graph) SourceOption { return func(c *sourceConfig) { c.graph = g } }

// WithDecoder sets the record decoder (default JSONReadingDecoder).
func WithDecoder(d Decoder) SourceOption { return func(c *sourceConfig) { c.decoder = d } }

// WithStateStore sets the durable StateStore the partitions' checkpoints
// go to and the next owner restores from. Required.
func WithStateStore(s streaming.StateStore) SourceOption {
	return func(c *sourceConfig) { c.durable = s }
}

// WithLocalStateStore sets a local StateStore (typically Badger on this
// machine) that receives a copy of every checkpoint and, on a lost
// assignment, the last state. On assign it is restored from when its
// cursor is at least the durable one's (default none).
func WithLocalStateStore(s streaming.StateStore) SourceOption {
	return func(c *sourceConfig) { c.local = s }
}

// WithCursorStore sets the checkpoints' cursor store (default: the group's
// offset commit, see GroupCursorStore).
func WithCursorStore(s streaming.CursorStore) SourceOption {
	return func(c *sourceConfig) { c.cursors = s }
}

// WithDeadLetterTopic sets the dead-letter topic of records from topic
// (default "<topic>.dlq").
func WithDeadLetterTopic(f func(topic string) string) SourceOption {
	return func(c *sourceConfig) { c.dlqTopic = f }
}

// WithRevokeTimeout bounds a revoked partition's final checkpoint (default
// 10s). On timeout the partition is released without a commit.
func WithRevokeTimeout(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.revokeTimeout = d }
}

// WithRestoreTimeout bounds an assigned partition's restore (default 1m).
func WithRestoreTimeout(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.restoreTimeout = d }
}

// WithSecurity sets TLS and SASL (default plaintext, no authentication).
func WithSecurity(s Security) SourceOption { return func(c *sourceConfig) { c.security = s } }

// WithLogger sets the logger (default discards).
func WithLogger(l *slog.Logger) SourceOption { return func(c *sourceConfig) { c.log = l } }

// WithOnApply sets a function called on the partition goroutine after each
// record is applied (default none). It is how outputs leave the graph.
func WithOnApply(f func(*Applied)) SourceOption { return func(c *sourceConfig) { c.onApply = f } }

// WithSinks adds sinks that every checkpoint flushes before saving state.
func WithSinks(s ...Flusher) SourceOption {
	return func(c *sourceConfig) { c.sinks = append(c.sinks, s...) }
}

// WithClientOptions adds raw franz-go client options (session timeouts,
// dialers, ...). They are applied after the Source's own.
func WithClientOptions(o ...kgo.Opt) SourceOption {
	return func(c *sourceConfig) { c.kgoOpts = append(c.kgoOpts, o...) }
}

// WithCheckpointerOptions adds options to every partition's
// streaming.Checkpointer.
func WithCheckpointerOptions(o ...streaming.CheckpointerOption) SourceOption {
	return func(c *sourceConfig) { c.cpOpts = append(c.cpOpts, o...) }
}

// WithQueueDepth sets how many polled batches may wait for one partition
// goroutine (default 4). A full queue blocks polling: back-pressure.
func WithQueueDepth(n int) SourceOption { return func(c *sourceConfig) { c.queueDepth = n } }

// WithCheckpointInterval checkpoints every owned partition each d while Run
// runs (default 0: off — the checkpoint workflow drives checkpoints through
// Checkpoint or Checkpointer).
func WithCheckpointInterval(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.interval = d }
}
