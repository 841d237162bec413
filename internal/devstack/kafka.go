package devstack

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is an in-process Kafka-protocol cluster on loopback.
type Kafka struct {
	c    *kfake.Cluster
	once sync.Once
}

// KafkaTopic is a topic to seed with its partition count.
type KafkaTopic struct {
	Name       string
	Partitions int32
}

// StartKafka starts a one-broker kfake cluster on a free loopback port
// with the topics created.
func StartKafka(topics ...KafkaTopic) (*Kafka, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }),
		// Short session timeouts let tests and the demo notice a dead member quickly.
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
	for _, t := range topics {
		if t.Partitions < 1 {
			return nil, fmt.Errorf("devstack: kafka topic %q: %d partitions, want at least 1", t.Name, t.Partitions)
		}
		opts = append(opts, kfake.SeedTopics(t.Partitions, t.Name))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devstack: start kfake cluster: %w", err)
	}
	return &Kafka{c: c}, nil
}

// Addrs are the seed brokers (host:port).
func (k *Kafka) Addrs() []string { return k.c.ListenAddrs() }

// Cluster is the underlying kfake cluster.
func (k *Kafka) Cluster() *kfake.Cluster { return k.c }

// Close stops the cluster. Idempotent.
func (k *Kafka) Close() error {
	k.once.Do(k.c.Close)
	return nil
}
