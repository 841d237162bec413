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
	revokeTimeout  time.Duration
	restoreTimeout time.Duration
	// Group liveness (0: franz-go's defaults) and static membership.
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	instanceID       string
	security         Security
	log              *slog.Logger
	kgoOpts          []kgo.Opt
	queueDepth       int
	maxPoll          int
}

func defaultSourceConfig() sourceConfig {
	return sourceConfig{
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
	case c.revokeTimeout <= 0:
		return fmt.Errorf("kafka source: revoke timeout %v must be positive", c.revokeTimeout)
	case c.restoreTimeout <= 0:
		return fmt.Errorf("kafka source: restore timeout %v must be positive", c.restoreTimeout)
	case c.sessionTimeout < 0 || c.rebalanceTimeout < 0:
		return fmt.Errorf("kafka source: session timeout %v and rebalance timeout %v must not be negative", c.sessionTimeout, c.rebalanceTimeout)
	case c.rebalanceTimeout > 0 && c.rebalanceTimeout <= c.revokeTimeout:
		return fmt.Errorf("kafka source: rebalance timeout %v must exceed the revoke timeout %v: a member still taking a revoked partition's final checkpoint would be removed from the group", c.rebalanceTimeout, c.revokeTimeout)
	case c.queueDepth < 1:
		return fmt.Errorf("kafka source: partition queue depth %d must be at least 1", c.queueDepth)
	case c.log == nil:
		return errors.New("kafka source: nil logger")
	}
	return c.security.Validate()
}

// kgoRebalanceTimeout is franz-go's default rebalance timeout.
const kgoRebalanceTimeout = 60 * time.Second

// groupOpts are the franz-go options of the group settings that are set.
func (c *sourceConfig) groupOpts() []kgo.Opt {
	var o []kgo.Opt
	if d := c.sessionTimeout; d > 0 {
		o = append(o, kgo.SessionTimeout(d), kgo.HeartbeatInterval(max(d/10, 50*time.Millisecond)))
	}
	if d := c.rebalanceTimeout; d > 0 {
		o = append(o, kgo.RebalanceTimeout(d))
	} else if c.revokeTimeout >= kgoRebalanceTimeout {
		// franz-go's default would not wait for a revoked partition's
		// final checkpoint (see WithRebalanceTimeout).
		o = append(o, kgo.RebalanceTimeout(c.revokeTimeout+2*time.Second))
	}
	if c.instanceID != "" {
		o = append(o, kgo.InstanceID(c.instanceID))
	}
	return o
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

// WithSessionTimeout sets the group session timeout: a member that sends
// no heartbeat for this long is removed and its partitions are assigned
// to the others (default franz-go's 45s). Heartbeats go every tenth of
// it (at least every 50ms), so a live member misses several before it is
// removed. It is also what a killed member costs: its partitions are idle
// from the kill until it expires.
func WithSessionTimeout(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.sessionTimeout = d }
}

// WithRebalanceTimeout sets how long the group waits, once a rebalance
// began, for every member to rejoin (default franz-go's 60s, or the
// revoke timeout plus 2s when that is not under it; Kafka's
// rebalance.timeout.ms, the group uses its members' largest). A member
// killed while joining holds the rebalance up to this long. It must
// exceed WithRevokeTimeout: a member rejoins only after its revoked
// partitions' final checkpoints.
func WithRebalanceTimeout(d time.Duration) SourceOption {
	return func(c *sourceConfig) { c.rebalanceTimeout = d }
}

// WithInstanceID makes the member static (KIP-345, Kafka 2.3+): it joins
// with group.instance.id id. A static member restarted within the session
// timeout gets its partitions back without a rebalance, and a stopped one
// does not leave the group: its partitions wait for it until the session
// timeout, then go to the others. Ids must be unique in the group: a
// member that another process with the same id replaces stops with
// ErrFencedInstance. Default: a dynamic member, which leaves the group
// when it stops.
func WithInstanceID(id string) SourceOption { return func(c *sourceConfig) { c.instanceID = id } }

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
