package kafka_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
)

// printer is a runtime (Partitions) that prints every record of the
// partitions it is given; package pipeline is the real one, with keyed
// state and checkpoints.
type printer struct{ done chan struct{} }

func (p printer) Open(_ context.Context, a kafka.Assignment) (kafka.PartitionHandler, int64, error) {
	fmt.Printf("open %s\n", a.Partition)
	return p, -1, nil // nothing restored: from the start of the log
}

func (p printer) Handle(_ context.Context, recs []*kgo.Record) error {
	for _, r := range recs {
		fmt.Printf("%s@%d %s\n", r.Key, r.Offset, r.Value)
		if r.Offset == 2 {
			close(p.done)
		}
	}
	return nil
}

func (p printer) Release(_ context.Context, final bool) error {
	fmt.Printf("release (final checkpoint: %v)\n", final)
	return nil
}

// A consumer-group member handing its partition to a runtime. kfake
// stands in for a Kafka cluster.
func ExampleNewSource() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "readings"))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	producer, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("readings"))
	for i, v := range []string{"20", "22", "24"} {
		producer.ProduceSync(context.Background(), &kgo.Record{Key: []byte("s-1"), Value: fmt.Appendf(nil, `{"sensor":"s-1","ts":%d,"value":%s}`, i, v)})
	}
	producer.Close()

	p := printer{done: make(chan struct{})}
	src, _ := kafka.NewSource(kafka.WithBrokers(brokers...), kafka.WithGroup("example"), kafka.WithTopics("readings"), kafka.WithPartitions(p))
	go src.Run(context.Background())
	<-p.done
	src.Close() // leaves the group: the partition is released with its final checkpoint
	// Output:
	// open readings/0
	// s-1@0 {"sensor":"s-1","ts":0,"value":20}
	// s-1@1 {"sensor":"s-1","ts":1,"value":22}
	// s-1@2 {"sensor":"s-1","ts":2,"value":24}
	// release (final checkpoint: true)
}
