package natskv

import (
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

type config struct {
	ttl       time.Duration
	markerTTL time.Duration
	storage   jetstream.StorageType
	replicas  int
	create    bool
	connPoll  time.Duration
}

func defaultConfig() config {
	return config{ttl: 10 * time.Second, storage: jetstream.FileStorage, replicas: 1, create: true, connPoll: 100 * time.Millisecond}
}

var jobName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c config) validate(job string) error {
	if !jobName.MatchString(job) {
		return fmt.Errorf("natskv: job name %q must be letters, digits, '_' or '-' (it names the buckets)", job)
	}
	if c.ttl < time.Second {
		return fmt.Errorf("natskv: lease TTL %v is below the 1s minimum JetStream KV enforces for expiry markers", c.ttl)
	}
	if c.markerTTL != 0 && c.markerTTL < time.Second {
		return fmt.Errorf("natskv: limit marker TTL %v must be at least 1s", c.markerTTL)
	}
	if c.replicas < 1 {
		return fmt.Errorf("natskv: replicas must be at least 1, got %d", c.replicas)
	}
	if c.connPoll <= 0 {
		return fmt.Errorf("natskv: connection poll interval must be positive, got %v", c.connPoll)
	}
	return nil
}

// Option configures Open.
type Option func(*config)

// WithLeaseTTL sets the ephemeral bucket's TTL (the lease). Minimum 1s.
// Default: 10s.
func WithLeaseTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithLimitMarkerTTL sets how long expiry and delete markers stay in the
// ephemeral bucket. Default: the lease TTL for a new bucket; an existing
// bucket keeps its own. Set, it must match an existing bucket's: Open
// fails with a Fatal error naming both durations otherwise.
func WithLimitMarkerTTL(d time.Duration) Option { return func(c *config) { c.markerTTL = d } }

// WithStorage chooses file or memory storage for newly created buckets.
// Default: jetstream.FileStorage.
func WithStorage(s jetstream.StorageType) Option { return func(c *config) { c.storage = s } }

// WithReplicas sets the replica count of newly created buckets. Default: 1.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithCreateBuckets controls whether Open creates missing buckets (true) or
// fails with a Fatal error naming the missing bucket. Default: true.
func WithCreateBuckets(create bool) Option { return func(c *config) { c.create = create } }

// WithConnectionPoll sets how often a watcher checks that the connection is
// up. Default: 100ms.
func WithConnectionPoll(d time.Duration) Option { return func(c *config) { c.connPoll = d } }
