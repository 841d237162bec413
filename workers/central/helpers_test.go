package central

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
)

const topic = "readings"

func newCluster(t testing.TB, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic, topic+".dlq"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// readingValue is a deterministic signal per sensor and sequence number
// that swings across the alarm thresholds (20/25) so episodes open and
// close.
func readingValue(sensor int, seq int) float64 {
	return 22.5 + 9*math.Sin(float64(seq)/6+float64(sensor))
}

type reading struct {
	sensor string
	ts     int64 // ms
	value  float64
}

func makeReadings(sensors, from, to int) []reading {
	var rs []reading
	for seq := from; seq <= to; seq++ {
		for s := 0; s < sensors; s++ {
			rs = append(rs, reading{sensor: fmt.Sprintf("s-%02d", s), ts: 1_700_000_000_000 + int64(seq)*1000, value: readingValue(s, seq)})
		}
	}
	return rs
}

func produce(t testing.TB, addrs []string, rs []reading) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, len(rs))
	for i, r := range rs {
		recs[i] = &kgo.Record{Key: []byte(r.sensor), Value: fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%v}`, r.sensor, r.ts, r.value)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

type outKey struct {
	sensor, signal string
	ts             int64
}

type outVal struct {
	mode  streaming.Mode
	value float64
}

// reference runs the graph over rs in one uninterrupted pass: the outputs
// a correct pipeline must produce, whatever its rebalances and replays.
func reference(t testing.TB, g GraphConfig, rs []reading) map[outKey]outVal {
	t.Helper()
	gr, err := Graph(g)
	require.NoError(t, err)
	keyed := streaming.NewKeyed[string](gr)
	out := map[outKey]outVal{}
	for _, r := range rs {
		in := keyed.Eval(r.sensor, r.ts, streaming.Float(r.value))
		for i, name := range graphOutputs {
			c := in.Output(i)
			if c.IsNone() {
				continue
			}
			v := outVal{value: c.Float64()}
			if name == SignalEpisode {
				v.mode = c.Mode()
			}
			out[outKey{r.sensor, name, r.ts * 1e6}] = v
		}
	}
	return out
}

// recorder is a Sink that keeps every output by (sensor, signal, ts) and
// notes any rewrite with a different value (a replay that computed
// something else than the first time).
type recorder struct {
	mu        sync.Mutex
	outs      map[outKey]outVal
	writes    int
	conflicts []string
	byWorker  map[string]int
	flushes   int
}

func newRecorder() *recorder { return &recorder{outs: map[outKey]outVal{}, byWorker: map[string]int{}} }

// as returns a Sink view of r that counts writes under worker.
func (r *recorder) as(worker string) Sink { return &recorderView{r: r, worker: worker} }

type recorderView struct {
	r      *recorder
	worker string
}

func (v *recorderView) Write(_ context.Context, outs []Output) error {
	r := v.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range outs {
		k := outKey{o.Sensor, o.Signal, o.TS}
		nv := outVal{mode: o.Mode, value: o.Value}
		if old, ok := r.outs[k]; ok && old != nv {
			r.conflicts = append(r.conflicts, fmt.Sprintf("%v: %v then %v (by %s)", k, old, nv, v.worker))
		}
		r.outs[k] = nv
		r.writes++
		r.byWorker[v.worker]++
	}
	return nil
}

func (v *recorderView) Flush(context.Context) error {
	v.r.mu.Lock()
	v.r.flushes++
	v.r.mu.Unlock()
	return nil
}

func (v *recorderView) Close(context.Context) error { return nil }

// requireExact checks the recorded outputs equal the reference exactly.
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

// dialThrough connects a Temporal client to srv through link, which the
// test can cut; the client is closed when the test ends.
func dialThrough(t testing.TB, srv *temporaltest.Server, link *faults.Net) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:          srv.HostPort,
		Logger:            quietTemporalLogger(),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithContextDialer(link.GRPCDial)}},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// cutStore is a StateStore whose writes fail once cut: a dead process
// writes nothing more.
type cutStore struct {
	streaming.StateStore
	mu  sync.Mutex
	cut bool
}

var errStoreCut = errors.New("state store unreachable: cut by test")

func (s *cutStore) Cut() {
	s.mu.Lock()
	s.cut = true
	s.mu.Unlock()
}

func (s *cutStore) isCut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

func (s *cutStore) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	if s.isCut() {
		return errStoreCut
	}
	return s.StateStore.Save(ctx, key, snap)
}

func (s *cutStore) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if s.isCut() {
		return errStoreCut
	}
	return s.StateStore.SaveBatch(ctx, items)
}

func (s *cutStore) Delete(ctx context.Context, key []byte) error {
	if s.isCut() {
		return errStoreCut
	}
	return s.StateStore.Delete(ctx, key)
}

func (s *cutStore) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if s.isCut() {
		return streaming.Snapshot{}, errStoreCut
	}
	return s.StateStore.Load(ctx, key)
}

func quietTemporalLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

func pendingActivities(d *client.WorkflowExecutionDescription) any {
	if d == nil || d.RawResponse == nil {
		return nil
	}
	return d.RawResponse.GetPendingActivities()
}
