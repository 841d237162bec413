package central

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// benchBaselines maps each benchmark to the baseline its ratio uses.
var benchBaselines = map[string]struct {
	name string
	fn   func(*testing.B)
}{
	"BenchmarkCheckpointRoundTrip":          {"inproc-checkpoint", baselineInProcessCheckpoint},
	"BenchmarkHotPathCheckpointEverySecond": {"no-checkpoints", baselineHotPathNoCheckpoints},
}

// TestMain measures the baselines of the selected benchmarks (in-process
// checkpoints; the hot path without checkpoints) before any benchmark
// runs, so benchratio.Report compares like with like in one run. Only the
// selected benchmarks' baselines run: the two need very different
// -benchtime values (checkpoints: 20x; hot path: records, 1000000x), and
// one run's -benchtime applies to every baseline.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		re, err := regexp.Compile(f.Value.String())
		if err == nil {
			names := make([]string, 0, len(benchBaselines))
			for bench := range benchBaselines {
				names = append(names, bench)
			}
			sort.Strings(names)
			for _, bench := range names {
				if re.MatchString(bench) {
					benchratio.Baseline(benchBaselines[bench].name, benchBaselines[bench].fn)
				}
			}
		}
	}
	os.Exit(m.Run())
}

const benchSensors = 200

// benchFixture is a running worker over one partition whose state holds
// benchSensors sensors.
type benchFixture struct {
	addrs []string
	w     *started
	prod  *kgo.Client
	seq   int
}

func newBenchFixture(b *testing.B, temporalAddr string, opts ...Option) *benchFixture {
	b.Helper()
	c := newCluster(b, 1)
	f := &benchFixture{addrs: c.ListenAddrs()}
	cfg := baseConfig(b, "bench", f.addrs, temporalAddr)
	cfg.Checkpoint.Interval = Duration(time.Hour) // only explicit checkpoints
	if temporalAddr == "" {
		cfg.Checkpoint.Disabled = true
	} else {
		cfg.Temporal.ControlWorker = true
	}
	f.w = startWorker(b, cfg, opts...)
	b.Cleanup(func() { f.w.stop(b) })
	var err error
	f.prod, err = kgo.NewClient(kgo.SeedBrokers(f.addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.prod.Close)
	f.touchAll(b) // the state every checkpoint covers
	return f
}

// touchAll applies one record to every sensor, so the next checkpoint
// writes every key (an incremental cut of the whole state).
func (f *benchFixture) touchAll(b *testing.B) {
	b.Helper()
	f.seq++
	recs := make([]*kgo.Record, benchSensors)
	for s := range recs {
		sensor := fmt.Sprintf("s-%03d", s)
		recs[s] = &kgo.Record{Key: []byte(sensor), Value: fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%v}`, sensor, int64(f.seq)*1000, readingValue(s, f.seq))}
	}
	if err := f.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	want := uint64(f.seq * benchSensors)
	waitFor(b, 30*time.Second, func() bool { return f.w.w.Source().Stats().Applied >= want })
}

func (f *benchFixture) checkpointer(b *testing.B) *streaming.Checkpointer {
	b.Helper()
	var cp *streaming.Checkpointer
	waitFor(b, 30*time.Second, func() bool {
		var ok bool
		cp, _, ok = f.w.w.Source().Checkpointer(kafka.Partition{Topic: topic, Partition: 0})
		return ok
	})
	return cp
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(b testing.TB, d time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("condition not met within %s", d)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// baselineInProcessCheckpoint: the Checkpointer's own three stages, in
// process, over the state of benchSensors sensors.
func baselineInProcessCheckpoint(b *testing.B) {
	b.StopTimer()
	f := newBenchFixture(b, "")
	cp := f.checkpointer(b)
	ctx := context.Background()
	for range b.N {
		f.touchAll(b)
		b.StartTimer()
		if _, err := cp.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
	}
}

// BenchmarkCheckpointRoundTrip is one checkpoint of the same state
// through the CheckpointWorkflow on a real dev server (checkpoint-now
// signal → snapshot, save, commit activities on the worker's queue),
// against the in-process Checkpointer ("x-inproc-checkpoint").
func BenchmarkCheckpointRoundTrip(b *testing.B) {
	b.StopTimer()
	srv := temporaltest.Start(b)
	f := newBenchFixture(b, srv.HostPort, WithTemporalClient(srv.Client))
	cp := f.checkpointer(b)
	shard := topic + "/0"
	id := workflows.CheckpointWorkflowID("plant", shard)
	ctx := context.Background()
	// The owner announcement started the workflow.
	waitFor(b, time.Minute, func() bool {
		st, err := queryCheckpoint(ctx, srv.Client, "plant", shard)
		return err == nil && st.Owner != nil
	})
	for range b.N {
		f.touchAll(b)
		before := cp.Status().LastID
		b.StartTimer()
		if err := srv.Client.SignalWorkflow(ctx, id, "", workflows.SignalCheckpointNow, workflows.CheckpointNow{Reason: "bench"}); err != nil {
			b.Fatal(err)
		}
		waitFor(b, time.Minute, func() bool { st := cp.Status(); return st.LastID > before && st.InFlightID == 0 })
		b.StopTimer()
	}
	if st, err := queryCheckpoint(ctx, srv.Client, "plant", shard); err == nil {
		b.ReportMetric(float64(st.LastDuration.Nanoseconds()), "workflow-stages-ns")
	}
	benchratio.Report(b, "inproc-checkpoint", baselineInProcessCheckpoint)
}

// hotPath pushes b.N readings of benchSensors sensors through a worker
// and times their consumption, from the first applied record to the last.
func hotPath(b *testing.B, checkpoints bool) {
	b.StopTimer()
	if b.N > hotPathMaxRecords {
		b.Skipf("the hot-path benchmark keeps every record in kfake: run it with -benchtime=Nx, N ≤ %d records (e.g. 5000000x), not %d", hotPathMaxRecords, b.N)
	}
	srv := temporaltest.Start(b)
	hotPathRun(b, b.N, srv.HostPort, !checkpoints, b.StartTimer, b.StopTimer, WithTemporalClient(srv.Client))
}

// hotPathMaxRecords bounds the records a hot-path run keeps in memory.
const hotPathMaxRecords = 5_000_000

func hotPathRun(tb testing.TB, n int, temporalAddr string, noCheckpoints bool, start, stop func(), opts ...Option) (produced, consumed time.Duration) {
	c := newCluster(tb, 2)
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Now()
	var perr atomic.Pointer[error]
	for i := range n {
		s := i % benchSensors
		sensor := fmt.Sprintf("s-%03d", s)
		seq := i / benchSensors
		cl.Produce(context.Background(), &kgo.Record{Key: []byte(sensor), Value: fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%v}`, sensor, int64(seq)*1000, readingValue(s, seq))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					perr.CompareAndSwap(nil, &err)
				}
			})
	}
	if err := cl.Flush(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if e := perr.Load(); e != nil {
		tb.Fatal(*e)
	}
	cl.Close()
	produced = time.Since(t0)
	cfg := baseConfig(tb, "hot", addrs, temporalAddr)
	cfg.Checkpoint.Disabled = noCheckpoints
	cfg.Temporal.ControlWorker = true
	w := startWorker(tb, cfg, opts...)
	defer w.stop(tb)
	src := w.w.Source()
	waitFor(tb, time.Minute, func() bool { return src.Stats().Applied > 0 })
	t1 := time.Now()
	start()
	waitFor(tb, 10*time.Minute, func() bool { return src.Stats().Applied >= uint64(n) })
	stop()
	consumed = time.Since(t1)
	if n > 1 {
		tb.Logf("N=%d: produced in %s, consumed in %s, %d checkpoints completed", n, produced.Round(time.Millisecond), consumed.Round(time.Millisecond), w.w.Host().completed())
	}
	return produced, consumed
}

// baselineHotPathNoCheckpoints: the same worker, connected to the same
// kind of dev server (lease workflow running), without checkpoints.
func baselineHotPathNoCheckpoints(b *testing.B) { hotPath(b, false) }

// BenchmarkHotPathCheckpointEverySecond is the hot path with each
// partition checkpointed every second through its CheckpointWorkflow,
// against the same worker without checkpoints ("x-no-checkpoints"; the
// target is at most 1/0.95 ≈ 1.053, i.e. ≥ 95% of the throughput). Each
// op is one record; run it with -benchtime=5000000x so the consumption
// spans checkpoints.
func BenchmarkHotPathCheckpointEverySecond(b *testing.B) {
	hotPath(b, true)
	benchratio.Report(b, "no-checkpoints", baselineHotPathNoCheckpoints)
}
