package kafka

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
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
	bareConsume(b, addrs, "bare", b.N)
	b.StopTimer()
}

// bareConsume reads n records with a fresh group consumer and returns how
// long it took.
func bareConsume(b *testing.B, addrs []string, group string, n int) time.Duration {
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("readings"),
		kgo.DisableAutoCommit(), kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := 0
	for got < n && ctx.Err() == nil {
		got += cl.PollFetches(ctx).NumRecords()
	}
	return time.Since(start)
}

// decodeCounter is the Partitions of the throughput benchmark: each
// partition's handler decodes every record (the JSON reading decoder) and
// counts it.
type decodeCounter struct {
	handled atomic.Int64
	target  int64
	done    chan struct{}
}

func (d *decodeCounter) Open(context.Context, Assignment) (PartitionHandler, int64, error) {
	return &countPart{d: d, dec: Decoded{Inputs: make([]streaming.Computed, 1)}}, -1, nil
}

type countPart struct {
	d   *decodeCounter
	dec Decoded
}

func (c *countPart) Handle(_ context.Context, recs []*kgo.Record) error {
	for _, r := range recs {
		if err := (JSONReadingDecoder{}).Decode(r, &c.dec); err != nil {
			return err
		}
	}
	if c.d.handled.Add(int64(len(recs))) >= c.d.target {
		select {
		case <-c.d.done:
		default:
			close(c.d.done)
		}
	}
	return nil
}

func (c *countPart) Release(context.Context, bool) error { return nil }

// BenchmarkSourceThroughput: records through consume → the partition
// goroutines → a handler that decodes each JSON reading, one op per
// record. x-bare-consume is its cost relative to a bare group consumer
// measured in the same run: the Source's own overhead (the keyed state
// and checkpoints are the runtime's; package pipeline benchmarks them).
func BenchmarkSourceThroughput(b *testing.B) {
	addrs := benchCluster(b, b.N)
	dc := &decodeCounter{target: int64(b.N), done: make(chan struct{})}
	src, err := NewSource(WithBrokers(addrs...), WithGroup("bench"), WithTopics("readings"), WithPartitions(dc))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := benchratio.CPUTime()
	errc := make(chan error, 1)
	go func() { errc <- src.Run(context.Background()) }()
	select {
	case <-dc.done:
	case err := <-errc:
		b.Fatal(err)
	case <-time.After(5 * time.Minute):
		b.Fatal("timeout")
	}
	b.StopTimer()
	cpuSource := benchratio.CPUTime() - cpu0
	_ = src.Close()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	benchratio.Report(b, "bare-consume", benchBareConsume)
	// The machine is shared, so also time a bare consumer of the very same
	// records right after (fresh group): x-bare-same-data compares two runs
	// seconds apart instead of a baseline measured at process start.
	cpu1 := benchratio.CPUTime()
	bare := bareConsume(b, addrs, "bare-after", b.N)
	cpuBare := benchratio.CPUTime() - cpu1
	b.ReportMetric(float64(b.Elapsed())/float64(bare), "x-bare-same-data")
	b.ReportMetric(float64(cpuSource)/float64(b.N), "cpu-ns/record")
	b.ReportMetric(float64(cpuBare)/float64(b.N), "bare-cpu-ns/record")
	b.ReportMetric(float64(cpuSource)/float64(cpuBare), "x-bare-cpu")
}

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{"BenchmarkSourceThroughput": {"bare-consume": benchBareConsume}})
}
