package kafka

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

const benchKeys = 64

// benchCluster returns a cluster whose "readings" topic holds n JSON
// readings spread over benchKeys sensors.
func benchCluster(b *testing.B, n int) []string {
	b.Helper()
	c := newCluster(b, 4)
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const batch = 5000
	recs := make([]*kgo.Record, 0, batch)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("sensor-%03d", i%benchKeys)
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: reading(k, i/benchKeys+1)})
		if len(recs) == batch || i == n-1 {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	return addrs
}

// benchBareConsume is the baseline: a group consumer that polls and
// counts records, nothing else.
func benchBareConsume(b *testing.B) {
	addrs := benchCluster(b, b.N)
	b.ResetTimer()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("bare"), kgo.ConsumeTopics("readings"),
		kgo.DisableAutoCommit(), kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := 0
	for n < b.N && ctx.Err() == nil {
		n += cl.PollFetches(ctx).NumRecords()
	}
	b.StopTimer()
	cl.Close()
}

func benchGraph(b *testing.B) *streaming.Graph {
	g, err := streaming.NewBuilder().Input("value").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(5) }, "value").
		Node("alarm", func() streaming.Operator { return ops.NewHysteresis(20, 25) }, "smooth").
		Build()
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkSourceThroughput: records through consume → JSON decode →
// keyed graph (SMA → hysteresis per sensor) → discard, one op per record.
// x-bare-consume is its cost relative to a bare group consumer measured in
// the same run (target ≤ 2, i.e. ≥ half the bare throughput).
func BenchmarkSourceThroughput(b *testing.B) {
	addrs := benchCluster(b, b.N)
	g := benchGraph(b)
	var applied atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	src, err := NewSource(WithBrokers(addrs...), WithGroup("bench"), WithTopics("readings"),
		WithGraph(g), WithStateStore(memory.New()),
		WithOnApply(func(*Applied) {
			if applied.Add(1) == target {
				close(done)
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	errc := make(chan error, 1)
	go func() { errc <- src.Run(context.Background()) }()
	select {
	case <-done:
	case err := <-errc:
		b.Fatal(err)
	case <-time.After(5 * time.Minute):
		b.Fatal("timeout")
	}
	b.StopTimer()
	_ = src.Close()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	benchratio.Report(b, "bare-consume", benchBareConsume)
}

func TestMain(m *testing.M) {
	benchratio.Main(m, map[string]func(*testing.B){"bare-consume": benchBareConsume})
}
