package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workers/pipelines"
)

// smaJob is the SMA job of workers/pipelines/sma-readings.yaml on the
// brokers addrs, its state under dir.
func smaJob(t testing.TB, addrs []string, dir string) pipeline.Pipeline {
	t.Helper()
	env := map[string]string{"KAFKA_BROKERS": addrs[0], "STATE_DIR": dir}
	p, err := pipeline.Parse(pipelines.Spec("sma-readings.yaml"), pipeline.WithEnv(func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}))
	require.NoError(t, err)
	return p
}

// feeder produces readings of sensors to the readings topic, keyed by
// sensor, as fast as kfake takes them.
type feeder struct {
	cl      *kgo.Client
	sensors int
	seq     int
	sent    atomic.Int64
}

func newFeeder(t testing.TB, addrs []string, sensors int) *feeder {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.MaxBufferedRecords(1<<20))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &feeder{cl: cl, sensors: sensors}
}

// feed produces n more readings and waits for their acknowledgement.
func (f *feeder) feed(ctx context.Context, n int) error {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		s := f.seq % f.sensors
		r := reading{sensor: fmt.Sprintf("s-%04d", s), ts: 1_700_000_000_000 + int64(f.seq/f.sensors)*1000, value: readingValue(s, f.seq/f.sensors)}
		recs[i] = &kgo.Record{Key: []byte(r.sensor), Value: r.json()}
		f.seq++
	}
	if err := f.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}
	f.sent.Add(int64(n))
	return nil
}

// TestCheckpointsCompleteUnderSaturation: a checkpoint's pre-commit
// flushed the Kafka sink with kgo's Flush, which waits until the
// producer's buffer is empty — under a saturated Kafka→Kafka pipeline the
// shards keep refilling it and no checkpoint completed (issue 16 item 8:
// 0 checkpoints in 9.9 s). Here the SMA job of sma-readings.yaml on 6
// partitions starts on a backlog and writes to a broker slower than it
// (5 ms per produce request, at most 100 records buffered): its sink's
// buffer stays full until the backlog is read, and 2 rounds of
// checkpoints of the 6 shards must complete meanwhile (after the worker's
// first record, before its last).
func TestCheckpointsCompleteUnderSaturation(t *testing.T) {
	const parts, backlog, rounds = 6, 20_000, 2
	c := newCluster(t, parts, "readings.sma")
	var nreq atomic.Int64
	addrs := c.ListenAddrs()
	p := smaJob(t, addrs, t.TempDir())
	p.Checkpoint.Interval = 10 * time.Millisecond
	sink := p.Sinks[0].(pipeline.KafkaSink)
	sink.MaxBuffered = 100
	p.Sinks[0] = sink

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, newFeeder(t, addrs, 1000).feed(ctx, backlog))
	// From now on the only producer is the worker's sink.
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		nreq.Add(1)
		// The slow broker: kfake serves requests one at a time, so this
		// holds back every request behind the produce request too.
		// (SleepControl, which would not, races inside kfake when
		// several requests sleep.)
		time.Sleep(5 * time.Millisecond)
		return nil, nil, false
	})

	// read holds the records the worker had read at each completed
	// checkpoint.
	var mu sync.Mutex
	var read []uint64
	var w atomic.Pointer[pipeline.Worker]
	r := start(t, p, pipeline.WithCheckpointObserver(func(streaming.ShardID, streaming.CheckpointStatus) {
		if w := w.Load(); w != nil {
			n := w.Stats().RecordsIn
			mu.Lock()
			read = append(read, n)
			mu.Unlock()
		}
	}))
	w.Store(r.w)
	require.Eventually(t, func() bool { return r.w.Stats().RecordsIn == backlog }, time.Minute, time.Millisecond)
	mu.Lock()
	total, saturated := len(read), 0
	for _, x := range read {
		if x > 0 && x < backlog {
			saturated++
		}
	}
	mu.Unlock()
	t.Logf("%d checkpoints completed, %d while the worker read its backlog (%d produce requests)", total, saturated, nreq.Load())
	require.GreaterOrEqual(t, saturated, rounds*parts, "checkpoints completed while the worker read its backlog")
	require.Eventually(t, func() bool { return r.w.Stats().RecordsOut == backlog }, time.Minute, time.Millisecond,
		"an SMA with warmup: partial emits per reading")
}
