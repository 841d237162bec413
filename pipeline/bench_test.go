package pipeline_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkSMASpec":        {"franzmap": baselineFranzMap},
		"BenchmarkSMASpecArchive": {"noarchive": baselineNoArchive},
		"BenchmarkSMASpecRounds":  {"nockpt": baselineSMANoCheckpoints},
	})
}

const benchPartitions, benchSensors = 6, 1000

// benchTopics is a kfake cluster of 6 partitions holding n readings of
// 1000 sensors.
func benchTopics(b *testing.B, n int) []string {
	b.Helper()
	c := newCluster(b, benchPartitions, "readings.sma")
	addrs := c.ListenAddrs()
	f := newFeeder(b, addrs, benchSensors)
	for left := n; left > 0; left -= 50_000 {
		require.NoError(b, f.feed(context.Background(), min(left, 50_000)))
	}
	return addrs
}

// baselineFranzMap is the job written by hand on franz-go with no
// runtime: one group consumer decoding the readings with encoding/json,
// per-sensor SMA(10) rings in a map (warm-up: partial), each SMA encoded
// with encoding/json and produced to readings.sma; no state beyond
// memory, no checkpoints. An op is one reading read, its SMA
// acknowledged.
func baselineFranzMap(b *testing.B) {
	addrs := benchTopics(b, b.N)
	b.ResetTimer()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("franzmap"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("readings.sma"))
	require.NoError(b, err)
	defer cl.Close()
	type ring struct {
		vals [10]float64
		n    int
		sum  float64
	}
	state := map[string]*ring{}
	ctx := context.Background()
	var failed error
	var mu sync.Mutex
	for read := 0; read < b.N; {
		fs := cl.PollFetches(ctx)
		require.NoError(b, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			var in struct {
				Sensor string  `json:"sensor"`
				TS     int64   `json:"ts"`
				Value  float64 `json:"value"`
			}
			if err := json.Unmarshal(r.Value, &in); err != nil {
				b.Fatal(err)
			}
			s := state[in.Sensor]
			if s == nil {
				s = &ring{}
				state[in.Sensor] = s
			}
			i := s.n % len(s.vals)
			s.sum += in.Value - s.vals[i]
			s.vals[i] = in.Value
			s.n++
			out, _ := json.Marshal(struct {
				Key   string  `json:"key"`
				Name  string  `json:"name"`
				TS    int64   `json:"ts"`
				Value float64 `json:"value"`
			}{in.Sensor, "sma", in.TS, s.sum / float64(min(s.n, len(s.vals)))})
			cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: out}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			})
			read++
		})
	}
	require.NoError(b, cl.Flush(ctx))
	b.StopTimer()
	require.NoError(b, failed)
}

// BenchmarkSMASpec runs the SMA job of workers/pipelines/sma-readings.yaml
// — 6 partitions on kfake, keyed state in Badger on disk, checkpoints
// every second to the worker's Badger — through b.N readings waiting in
// the topic, from the worker's start until every SMA is acknowledged,
// against baselineFranzMap in the same run (x-franzmap: the pipeline's
// time per reading over the baseline's; below 1 is faster). The worker
// runs saturated (the backlog never runs out before the end); ckpt-p50-ms
// and ckpt-p99-ms are its checkpoints' durations against
// ckpt-interval-ms. Run it long enough for checkpoints:
//
//	go test -run '^$' -bench SMASpec -benchtime 1500000x ./pipeline/
func BenchmarkSMASpec(b *testing.B) {
	p, ds, _ := runSMASpec(b, false)
	benchratio.Report(b, "franzmap", baselineFranzMap)
	reportCheckpoints(b, p, ds)
}

// baselineNoArchive is BenchmarkSMASpec: the SMA job without an archive.
func baselineNoArchive(b *testing.B) { runSMASpec(b, false) }

// BenchmarkSMASpecArchive is BenchmarkSMASpec with the Parquet archive
// sink added (a local folder; one rolling file per partition, a
// pre-commit per checkpoint), against the same job without it, in the
// same run. x-noarchive is benchratio's: the time per reading over the
// baseline measured before the benchmark. On a shared machine that drifts
// with the load, so the benchmark also runs the two jobs in alternation,
// pairedRounds times b.N readings each, which one goes first swapped every
// round (a run pays for the runs before it in the process: their kfake
// clusters stay until the benchmark ends), and reports the medians of the
// rounds' ratios: x-noarchive-paired (wall time per reading; the
// archive-on throughput ratio, throughput-ratio, is its inverse: target
// ≥ 0.95) and x-cpu-noarchive-paired (the process's CPU time per reading,
// kfake and the feeder included, the same in both). ns/op is the last
// archive-on run's.
//
//	go test -run '^$' -bench SMASpecArchive -benchtime 300000x ./pipeline/
func BenchmarkSMASpecArchive(b *testing.B) {
	const pairedRounds = 5
	var wall, cpu []float64
	var p pipeline.Pipeline
	var ds []time.Duration
	for i := range pairedRounds {
		var on, off timed
		if i%2 == 0 {
			_, _, off = runSMASpec(b, false)
			p, ds, on = runSMASpec(b, true)
		} else {
			p, ds, on = runSMASpec(b, true)
			_, _, off = runSMASpec(b, false)
		}
		wall, cpu = append(wall, float64(on.wall)/float64(off.wall)), append(cpu, float64(on.cpu)/float64(off.cpu))
	}
	benchratio.Report(b, "noarchive", baselineNoArchive)
	slices.Sort(wall)
	slices.Sort(cpu)
	b.ReportMetric(wall[len(wall)/2], "x-noarchive-paired")
	b.ReportMetric(cpu[len(cpu)/2], "x-cpu-noarchive-paired")
	b.ReportMetric(1/wall[len(wall)/2], "throughput-ratio")
	reportCheckpoints(b, p, ds)
}

// runSMASpec runs the SMA job (with the archive sink when archive) through
// b.N readings waiting in the topic, timed from the worker's start until
// every SMA is acknowledged, and returns the job and its checkpoints'
// durations.
func runSMASpec(b *testing.B, archive bool) (pipeline.Pipeline, []time.Duration, timed) {
	addrs := benchTopics(b, b.N)
	p := smaJob(b, addrs, b.TempDir())
	if archive {
		p.Sinks = append(p.Sinks, pipeline.ArchiveSink{Dir: b.TempDir()})
	}
	b.ResetTimer()
	ds, t := runSMA(b, p)
	return p, ds, t
}

// runSMA runs a worker of p (with opts) until b.N SMAs are acknowledged,
// timed from the worker's start, and returns the durations of the
// checkpoints it completed meanwhile and the wall and CPU time it took.
func runSMA(b *testing.B, p pipeline.Pipeline, opts ...pipeline.Option) ([]time.Duration, timed) {
	var ds []time.Duration
	t := runWorkerUntil(b, p, &ds, func(w *pipeline.Worker) bool {
		return w.Sinks()[0].(*kafka.OutputSink).Produced() >= uint64(b.N)
	}, nil, opts...)
	return ds, t
}

// runWorkerUntil runs a worker of p (with opts) until done says so
// (polled every millisecond), timed from the worker's start, and returns
// the wall and CPU time it took; *ds gets the durations of the
// checkpoints it completed meanwhile. Then, untimed, it waits (a minute
// at most) until settled says so, if given, before stopping the worker.
func runWorkerUntil(b *testing.B, p pipeline.Pipeline, ds *[]time.Duration, done, settled func(*pipeline.Worker) bool, opts ...pipeline.Option) timed {
	b.Helper()
	var mu sync.Mutex
	var durs []time.Duration
	b.StartTimer() // stopped by the previous run of a paired benchmark
	w0, c0 := time.Now(), benchratio.CPUTime()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := pipeline.NewWorker(ctx, p, append([]pipeline.Option{pipeline.WithLogger(testLogger(b)),
		pipeline.WithCheckpointObserver(func(_ streaming.ShardID, st streaming.CheckpointStatus) {
			mu.Lock()
			durs = append(durs, st.LastDuration)
			mu.Unlock()
		})}, opts...)...)
	require.NoError(b, err)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	for !done(w) {
		select {
		case err := <-stopped:
			b.Fatalf("worker stopped: %v", err)
		case <-time.After(time.Millisecond): // poll interval
		}
	}
	b.StopTimer()
	t := timed{wall: time.Since(w0), cpu: benchratio.CPUTime() - c0}
	mu.Lock()
	*ds = slices.Clone(durs)
	mu.Unlock()
	for deadline := time.Now().Add(time.Minute); settled != nil && !settled(w); {
		if time.Now().After(deadline) {
			b.Fatal("the worker's outputs did not settle within a minute")
		}
		select {
		case err := <-stopped:
			b.Fatalf("worker stopped: %v", err)
		case <-time.After(time.Millisecond): // poll interval
		}
	}
	cancel()
	require.NoError(b, <-stopped)
	return t
}

// timed is the wall and CPU time of a benchmark's timed part.
type timed struct{ wall, cpu time.Duration }

// reportCheckpoints reports the throughput and the checkpoints' count and
// p50/p99 durations against the interval.
func reportCheckpoints(b *testing.B, p pipeline.Pipeline, ds []time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(len(ds)), "checkpoints")
	b.ReportMetric(float64(p.Checkpoint.Interval.Milliseconds()), "ckpt-interval-ms")
	if len(ds) > 0 {
		slices.Sort(ds)
		q := func(f float64) float64 { return float64(ds[int(f*float64(len(ds)-1))].Microseconds()) / 1000 }
		b.ReportMetric(q(0.5), "ckpt-p50-ms")
		b.ReportMetric(q(0.99), "ckpt-p99-ms")
	}
}

// baselineSMANoCheckpoints is BenchmarkSMASpec's job with no checkpoints
// at all (checkpoint.disabled, no Temporal): the hot path alone. Its CPU
// time per reading (last run) is noCheckpointsCPU.
func baselineSMANoCheckpoints(b *testing.B) {
	addrs := benchTopics(b, b.N)
	p := smaJob(b, addrs, b.TempDir())
	p.Checkpoint.Disabled = true
	b.ResetTimer()
	_, t := runSMA(b, p)
	noCheckpointsCPU = float64(t.cpu.Nanoseconds()) / float64(max(b.N, 1))
}

var noCheckpointsCPU float64

// BenchmarkSMASpecRounds is BenchmarkSMASpec's job with its checkpoints
// driven by the pipeline's checkpoint coordinator on a Temporal dev
// server, a round every second (the worker runs the control workflows
// too), against the same job with no checkpoints in the same run
// (x-nockpt: time per reading over the baseline's; throughput-ratio is
// its inverse, the target ≥ 0.97). On a shared machine the wall times
// also measure the other processes: cpu-throughput-ratio is the
// baseline's CPU time per reading over this one's (this process only: the
// dev server's CPU is not counted, server-cpu-ns/op shows it).
// checkpoints counts the shard checkpoints the rounds took. Run it long
// enough for several rounds:
//
//	go test -run '^$' -bench SMASpecRounds -benchtime 3000000x ./pipeline/
func BenchmarkSMASpecRounds(b *testing.B) {
	srv := temporaltest.Start(b)
	addrs := benchTopics(b, b.N)
	p := smaJob(b, addrs, b.TempDir())
	p.Checkpoint.Interval = time.Second
	srv0 := srv.CPU(b)
	b.ResetTimer()
	ds, t := runSMA(b, p, pipeline.WithWorkerID("bench"), pipeline.WithTemporal(srv.Client), pipeline.WithControlWorker())
	server := float64(srv.CPU(b)-srv0) / float64(b.N)
	cpu := float64(t.cpu.Nanoseconds()) / float64(max(b.N, 1))
	benchratio.Report(b, "nockpt", baselineSMANoCheckpoints)
	reportCheckpoints(b, p, ds)
	if base := benchratio.Baseline("nockpt", baselineSMANoCheckpoints); base.N > 0 && b.N > 0 {
		per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		basePer := float64(base.T.Nanoseconds()) / float64(base.N)
		b.ReportMetric(basePer/per, "throughput-ratio")
	}
	b.ReportMetric(cpu, "cpu-ns/op")
	b.ReportMetric(server, "server-cpu-ns/op")
	if noCheckpointsCPU > 0 && cpu > 0 {
		b.ReportMetric(noCheckpointsCPU/cpu, "cpu-throughput-ratio")
	}
}
