package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SourceOption configures a Source.
type SourceOption func(*sourceConfig)

type sourceConfig struct {
	brokers        []string
	group          string
	topics         []string
	partitions     Partitions
	dlqTopic       func(topic string) string
	revokeTimeout  time.Duration
	restoreTimeout time.Duration
	security       Security
	log            *slog.Logger
	kgoOpts        []kgo.Opt
	queueDepth     int
	maxPoll        int
}

func defaultSourceConfig() sourceConfig {
	return sourceConfig{
		dlqTopic:       func(t string) string { return t + ".dlq" },
		revokeTimeout:  10 * time.Second,
		restoreTimeout: time.Minute,
		log:            slog.New(slog.DiscardHandler),
		queueDepth:     4,
		maxPoll:        10000,
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
	case c.partitions == nil:
		return errors.New("kafka source: no runtime for the partitions (WithPartitions): records would go nowhere")
	case c.dlqTopic == nil:
		return errors.New("kafka source: nil dead-letter topic function")
	case c.revokeTimeout <= 0:
		return fmt.Errorf("kafka source: revoke timeout %v must be positive", c.revokeTimeout)
	case c.restoreTimeout <= 0:
		return fmt.Errorf("kafka source: restore timeout %v must be positive", c.restoreTimeout)
	case c.queueDepth < 1:
		return fmt.Errorf("kafka source: partition queue depth %d must be at least 1", c.queueDepth)
	case c.log == nil:
		return errors.New("kafka source: nil logger")
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

// WithDeadLetterTopic sets the dead-letter topic of records from topic
// (default "<topic>.dlq").
func WithDeadLetterTopic(f func(topic string) string) SourceOption {
	return func(c *sourceConfig) { c.dlqTopic = f }
}

// WithRevokeTimeout bounds a revoked partition's Release, its final
// checkpoint (default 10s): the Release's context ends then, and the
// partition is released without a commit.
func WithRevokeTimeout(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.revokeTimeout = d }
}

// WithRestoreTimeout bounds an assigned partition's Open, its restore
// (default 1m).
func WithRestoreTimeout(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.restoreTimeout = d }
}

// WithSecurity sets TLS and SASL (default plaintext, no authentication).
func WithSecurity(s Security) SourceOption { return func(c *sourceConfig) { c.security = s } }

// WithLogger sets the logger (default discards).
func WithLogger(l *slog.Logger) SourceOption { return func(c *sourceConfig) { c.log = l } }

// WithClientOptions adds raw franz-go client options (session timeouts,
// dialers, ...). They are applied after the Source's own.
func WithClientOptions(o ...kgo.Opt) SourceOption {
	return func(c *sourceConfig) { c.kgoOpts = append(c.kgoOpts, o...) }
}

// WithQueueDepth sets how many polled batches may wait for one partition
// goroutine (default 4). A full queue blocks polling: back-pressure.
func WithQueueDepth(n int) SourceOption { return func(c *sourceConfig) { c.queueDepth = n } }
