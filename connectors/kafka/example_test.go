package kafka_test

import (
	"context"
	"fmt"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A consumer-group member that smooths each sensor's readings. kfake
// stands in for a Kafka cluster.
func ExampleNewSource() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "readings", "readings.dlq"))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	producer, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("readings"))
	for i, v := range []string{"20", "22", "oops", "24", "26"} {
		value := fmt.Appendf(nil, `{"sensor":"s-1","ts":%d,"value":%s}`, i, v)
		if v == "oops" {
			value = []byte(v) // malformed: goes to readings.dlq
		}
		producer.ProduceSync(context.Background(), &kgo.Record{Key: []byte("s-1"), Value: value})
	}
	producer.Close()

	g, _ := streaming.NewBuilder().Input("value").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(2) }, "value").Build()
	done := make(chan struct{})
	var src *kafka.Source
	src, _ = kafka.NewSource(
		kafka.WithBrokers(brokers...), kafka.WithGroup("example"), kafka.WithTopics("readings"),
		kafka.WithGraph(g), kafka.WithStateStore(memory.New()),
		kafka.WithOnApply(func(a *kafka.Applied) {
			if out := a.Instance.Output(0); !out.IsNone() {
				fmt.Printf("%s@%d smooth=%v\n", a.Key, a.Offset, out)
			}
			if a.Offset == 4 {
				close(done)
			}
		}))
	go src.Run(context.Background())
	<-done
	src.Close() // leaves the group after the final checkpoint
	fmt.Println("dead letters:", src.Stats().DeadLettered)
	// Output:
	// s-1@1 smooth=21
	// s-1@3 smooth=23
	// s-1@4 smooth=25
	// dead letters: 1
}
