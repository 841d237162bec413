package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

const topic = "readings"

func newCluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	all := append([]string{topic, topic + ".dlq"}, topics...)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, all...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// readingValue is a deterministic value per sensor and sequence number
// that swings across 20..25 so hysteresis alarms open and close.
func readingValue(sensor, seq int) float64 {
	return math.Round((22.5+9*math.Sin(float64(seq)/6+float64(sensor)))*1000) / 1000
}

type reading struct {
	sensor string
	ts     int64 // ms
	value  float64
}

func makeReadings(sensors, from, to int) []reading {
	var rs []reading
	for seq := from; seq <= to; seq++ {
		for s := range sensors {
			rs = append(rs, reading{sensor: fmt.Sprintf("s-%02d", s), ts: 1_700_000_000_000 + int64(seq)*1000, value: readingValue(s, seq)})
		}
	}
	return rs
}

func (r reading) json() []byte {
	return fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%v}`, r.sensor, r.ts, r.value)
}

func produce(t testing.TB, addrs []string, rs []reading) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, len(rs))
	for i, r := range rs {
		recs[i] = &kgo.Record{Key: []byte(r.sensor), Value: r.json()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

func messages(rs []reading) func(func(pipeline.Message) bool) {
	return func(yield func(pipeline.Message) bool) {
		for _, r := range rs {
			if !yield(pipeline.Message{Topic: topic, Key: []byte(r.sensor), Value: r.json()}) {
				return
			}
		}
	}
}

type outKey struct {
	key, name string
	ts        int64
}

type outVal struct {
	mode  streaming.Mode
	value float64
}

// reference runs p over rs in one uninterrupted pass (Evaluate): what a
// correct run produces, whatever its rebalances and replays.
func reference(t testing.TB, p pipeline.Pipeline, rs []reading) map[outKey]outVal {
	t.Helper()
	s := streaming.NewMemorySink()
	_, err := pipeline.Evaluate(context.Background(), p, messages(rs), s)
	require.NoError(t, err)
	return collect(s.Outputs())
}

func collect(outs []streaming.Output) map[outKey]outVal {
	m := map[outKey]outVal{}
	for _, o := range outs {
		m[outKey{o.Key, o.Name, o.TS}] = outVal{o.Mode, o.Value}
	}
	return m
}

// recorder is a sink keeping every output by (key, name, ts) and noting
// any rewrite with another value (a replay that computed something else).
type recorder struct {
	mu        sync.Mutex
	outs      map[outKey]outVal
	conflicts []string
	writes    int
	flushes   int
}

func newRecorder() *recorder { return &recorder{outs: map[outKey]outVal{}} }

func (r *recorder) Write(_ context.Context, outs []streaming.Output) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range outs {
		k, v := outKey{o.Key, o.Name, o.TS}, outVal{o.Mode, o.Value}
		if old, ok := r.outs[k]; ok && old != v {
			r.conflicts = append(r.conflicts, fmt.Sprintf("%v: %v then %v", k, old, v))
		}
		r.outs[k] = v
		r.writes++
	}
	return nil
}

func (r *recorder) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	r.mu.Lock()
	r.flushes++
	r.mu.Unlock()
	return nil
}

func (r *recorder) Close(context.Context) error { return nil }

// shared makes r one sink of several workers: the runtime closes each
// worker's sinks, r survives them.
func (r *recorder) shared() pipeline.SinkSpec { return pipeline.Use(r) }

func (r *recorder) has(want map[outKey]outVal) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range want {
		if _, ok := r.outs[k]; !ok {
			return false
		}
	}
	return true
}

func (r *recorder) requireExact(t testing.TB, want map[outKey]outVal) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.conflicts, "a replayed record produced different outputs")
	var missing, wrong, extra []string
	for k, v := range want {
		got, ok := r.outs[k]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprint(k))
		case got != v:
			wrong = append(wrong, fmt.Sprintf("%v: got %v want %v", k, got, v))
		}
	}
	for k := range r.outs {
		if _, ok := want[k]; !ok {
			extra = append(extra, fmt.Sprint(k))
		}
	}
	require.Empty(t, wrong, "outputs differ from an uninterrupted run")
	require.Empty(t, missing, "outputs missing")
	require.Empty(t, extra, "outputs an uninterrupted run does not produce")
}

// alarmPipeline is a small keyed graph over readings from Kafka: a mean,
// a hysteresis alarm on it and its episodes.
func alarmPipeline(addrs []string, dir string, sinks ...pipeline.SinkSpec) pipeline.Pipeline {
	return pipeline.Pipeline{
		Name:   "plant",
		Source: pipeline.KafkaSource{Brokers: addrs, Topic: topic, SessionTimeout: 10 * time.Second},
		Graph: pipeline.Graph{
			Inputs: []pipeline.Input{{Name: "value"}},
			Nodes: []pipeline.Node{
				{Name: "mean", Type: "sma", Params: map[string]any{"window": 3}, Inputs: []string{"value"}},
				{Name: "alarm", Type: "hysteresis", Params: map[string]any{"low": 20, "high": 25}, Inputs: []string{"mean"}},
				{Name: "alarm_episode", Type: "episode", Inputs: []string{"alarm"}},
			},
			Outputs: []string{"mean", "alarm_episode"},
		},
		Sinks:      sinks,
		State:      pipeline.State{Memory: 96 << 20, Durable: pipeline.Durable{Dir: dir}},
		Checkpoint: pipeline.Checkpoint{Interval: time.Hour},
	}
}

// appliedOnCutStore starts worker "a" of the alarm pipeline over a
// cluster of parts partitions, its durable store a cutStore, and waits
// until it applied eight sensors' readings 1 to 10.
func appliedOnCutStore(t *testing.T, parts int32) (*running, *cutStore, pipeline.Pipeline) {
	t.Helper()
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	store := &cutStore{StateStore: memory.New()}
	p := alarmPipeline(addrs, "", newRecorder().shared())
	p.State.Durable = pipeline.Durable{Store: store}
	rs := makeReadings(8, 1, 10)
	produce(t, addrs, rs)
	w := start(t, p, pipeline.WithWorkerID("a"))
	w.waitFor(t, func() bool { return w.w.Stats().RecordsIn == uint64(len(rs)) }, 30*time.Second, "records applied")
	return w, store, p
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("TFLO_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

// logLines is a log destination tests read back (safe for concurrent
// use).
type logLines struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// running is a worker running in the background.
type running struct {
	w      *pipeline.Worker
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, p pipeline.Pipeline, opts ...pipeline.Option) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := pipeline.NewWorker(ctx, p, append([]pipeline.Option{pipeline.WithLogger(testLogger(t))}, opts...)...)
	require.NoError(t, err)
	r := &running{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// ready asks the worker whether it is ready, as a probe does (5 s).
func (r *running) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.w.Ready(ctx)
}

// waitFor waits until cond holds, for at most timeout. When it does not,
// it logs the worker's counters and shards and dumps every goroutine
// before failing, so a run that stalls (in CI, once in many) says where.
func (r *running) waitFor(t testing.TB, cond func() bool, timeout time.Duration, msg string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			if cond() {
				return
			}
			t.Logf("worker stats: %+v", r.w.Stats())
			for _, s := range r.w.Shards() {
				t.Logf("shard %s: epoch %d, restored %d, checkpoint %+v, state %+v", s.Shard, s.Epoch, s.Restored, s.Checkpoint, s.State)
			}
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("%s (after %v)", msg, timeout)
		}
	}
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	require.NoError(t, r.stopErr(t))
}

// stopErr stops the worker and returns Run's error (nil when stop or
// stopErr already received it).
func (r *running) stopErr(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop")
	}
	return nil
}
