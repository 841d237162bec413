package pipeline_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/loopport"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// seqCheck is a test operator that expects, per key, the values 1, 2, 3,
// ...: it counts records and every value that is not last+1, so a record
// lost or applied twice shows in its state. It emits the count, with
// mode 1 once any violation was seen.
type seqCheck struct {
	streaming.Base
	last, count, violations int64
}

func (*seqCheck) Name() string        { return "seqcheck" }
func (*seqCheck) TypeVersion() uint32 { return 1 }
func (o *seqCheck) Reset()            { *o = seqCheck{} }
func (o *seqCheck) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	v := int64(in[0].Float64())
	if v != o.last+1 {
		o.violations++
	}
	o.last = v
	o.count++
	mode := streaming.Mode(0)
	if o.violations > 0 {
		mode = 1
	}
	return streaming.Sig(mode, float64(o.count))
}
func (o *seqCheck) Save() ([]byte, error) {
	b := binary.AppendVarint(nil, o.last)
	b = binary.AppendVarint(b, o.count)
	return binary.AppendVarint(b, o.violations), nil
}
func (o *seqCheck) Load(b []byte) error {
	var vals [3]int64
	for i := range vals {
		v, n := binary.Varint(b)
		if n <= 0 {
			return &streaming.OperatorLoadError{Operator: "seqcheck", Reason: "truncated"}
		}
		vals[i], b = v, b[n:]
	}
	o.last, o.count, o.violations = vals[0], vals[1], vals[2]
	return nil
}

// seqRegistry is the catalogs plus seqcheck: a user's own operator type,
// registered the way the catalogs register theirs.
func seqRegistry(t testing.TB) *streaming.Registry {
	r := pipeline.NewRegistry()
	require.NoError(t, r.Register(streaming.OperatorType{
		Name: "seqcheck", Doc: "Counts records and records out of sequence.", MinInputs: 1, MaxInputs: 1,
		Output: "signal: the count, mode 1 once a record was out of sequence", TypeVersion: 1,
		Modes: map[streaming.Mode]string{0: "in_order", 1: "violated"},
		New: func(streaming.Params) (func() streaming.Operator, error) {
			return func() streaming.Operator { return &seqCheck{} }, nil
		},
	}))
	return r
}

func seqPipeline(addrs []string, durable streaming.StateStore, sinks ...pipeline.SinkSpec) pipeline.Pipeline {
	return pipeline.Pipeline{
		Name:   "seq",
		Source: pipeline.KafkaSource{Brokers: addrs, Topic: topic, Group: "central", SessionTimeout: 10 * time.Second},
		Graph: pipeline.Graph{Inputs: []pipeline.Input{{Name: "value"}},
			Nodes: []pipeline.Node{{Name: "check", Type: "seqcheck", Inputs: []string{"value"}}}},
		Sinks:      sinks,
		State:      pipeline.State{Memory: 96 << 20, Durable: pipeline.Durable{Store: durable}},
		Checkpoint: pipeline.Checkpoint{Interval: time.Hour},
	}
}

// seqReading is key's reading number seq (its value is seq).
func seqReading(key string, seq int) []byte {
	return fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%d}`, key, 1_700_000_000_000+int64(seq), seq)
}

func produceSeq(t testing.TB, addrs []string, keys []string, from, to int) {
	t.Helper()
	require.NoError(t, tryProduceSeq(addrs, keys, from, to))
}

func tryProduceSeq(addrs []string, keys []string, from, to int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for seq := from; seq <= to; seq++ {
		for _, k := range keys {
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: seqReading(k, seq)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

func sensorKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("sensor-%03d", i)
	}
	return ks
}

// journal is a sink recording every output of every worker: which worker
// applied which key's record at which epoch, and each key's latest count.
type journal struct {
	mu      sync.Mutex
	events  []journalEvent
	counts  map[string]float64 // key → count at its highest seq
	highest map[string]int64   // key → highest seq seen
	violate map[string]bool
}

type journalEvent struct {
	worker, key string
	seq         int64
	epoch       streaming.Epoch
}

func newJournal() *journal {
	return &journal{counts: map[string]float64{}, highest: map[string]int64{}, violate: map[string]bool{}}
}

func (j *journal) as(worker string) pipeline.SinkSpec { return pipeline.Use(journalView{j, worker}) }

type journalView struct {
	j      *journal
	worker string
}

func (v journalView) Write(_ context.Context, outs []streaming.Output) error {
	j := v.j
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, o := range outs {
		seq := (o.TS/1e6 - 1_700_000_000_000)
		j.events = append(j.events, journalEvent{v.worker, o.Key, seq, o.Epoch})
		if seq >= j.highest[o.Key] {
			j.highest[o.Key], j.counts[o.Key] = seq, o.Value
		}
		if o.Mode != 0 || o.Dead != nil { // a dead letter never reaches the other sinks
			j.violate[o.Key] = true
		}
	}
	return nil
}

func (journalView) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	return nil
}
func (journalView) Close(context.Context) error { return nil }

func (j *journal) allReached(keys []string, n int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range keys {
		if j.highest[k] < int64(n) {
			return false
		}
	}
	return true
}

func (j *journal) byWorker() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	m := map[string]int{}
	for _, e := range j.events {
		m[e.worker]++
	}
	return m
}

// requireExactlyOnce: every key's state counted each of its n records
// once, in order, and no key was applied by two workers in one epoch.
func (j *journal) requireExactlyOnce(t *testing.T, keys []string, n int) {
	t.Helper()
	j.requireCounted(t, keys, n)
	j.mu.Lock()
	defer j.mu.Unlock()
	owner := map[string]string{}
	for _, e := range j.events {
		k := fmt.Sprintf("%s@%d", e.key, e.epoch)
		if o, ok := owner[k]; ok && o != e.worker {
			t.Fatalf("key %s processed by %s and %s in epoch %d", e.key, o, e.worker, e.epoch)
		}
		owner[k] = e.worker
	}
}

// requireCounted: every key's state counted each of its n records once,
// in order.
func (j *journal) requireCounted(t *testing.T, keys []string, n int) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range keys {
		require.Equal(t, int64(n), j.highest[k], "key %s: highest record", k)
		require.Equal(t, float64(n), j.counts[k], "key %s: records counted by the state (a loss or a record applied twice)", k)
		require.False(t, j.violate[k], "key %s: a record out of sequence reached the state", k)
	}
}

// TestRebalanceMidStream: workers join while a producer keeps writing;
// cooperative rebalances move partitions with a final checkpoint on the
// old owner and a restore on the new one. Every key's state ends having
// counted each record once, and no key was applied by two workers in
// one epoch.
func TestRebalanceMidStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
	}{{"two workers", 2}, {"three workers", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			const parts, total = 6, 300
			c := newCluster(t, parts)
			addrs := c.ListenAddrs()
			keys := sensorKeys(24)
			durable := memory.New()
			j := newJournal()
			reg := seqRegistry(t)

			produced := make(chan struct{})
			go func() {
				defer close(produced)
				for seq := 1; seq <= total; seq++ {
					if err := tryProduceSeq(addrs, keys, seq, seq); err != nil {
						t.Errorf("produce seq %d: %v", seq, err)
						return
					}
				}
			}()
			minSeq := func() int64 {
				j.mu.Lock()
				defer j.mu.Unlock()
				lo := int64(total)
				for _, k := range keys {
					lo = min(lo, j.highest[k])
				}
				return lo
			}
			var ws []*running
			for i := range tc.workers {
				// Join when the stream is i/(workers+1) of the way through.
				at := int64(total * i / (tc.workers + 1))
				require.Eventually(t, func() bool { return minSeq() >= at }, 30*time.Second, 2*time.Millisecond)
				name := "w" + strconv.Itoa(i)
				ws = append(ws, start(t, seqPipeline(addrs, durable, j.as(name)), pipeline.WithWorkerID(name), pipeline.WithOperators(reg)))
				require.Eventually(t, func() bool { return ws[i].w.Stats().Owned > 0 }, 20*time.Second, 2*time.Millisecond)
			}
			<-produced
			require.Eventually(t, func() bool { return j.allReached(keys, total) }, 30*time.Second, 10*time.Millisecond)
			for i := range ws {
				require.Positive(t, j.byWorker()["w"+strconv.Itoa(i)], "worker %d applied nothing", i)
			}
			for _, w := range ws {
				w.stop(t)
			}
			j.requireExactlyOnce(t, keys, total)
		})
	}
}

// TestDeadLetters: records that cannot be decoded, among good ones, go to
// the dead-letter topic with headers naming their source and the reason;
// the good ones are applied, the counter rises, and the checkpoint's
// pre-commit waits for the dead letters before the cursor moves past them.
func TestDeadLetters(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	j := newJournal()
	bad := map[string]string{ // value → expected reason fragment
		`{"sensor":"s-1","ts":1,"value":"hot"}`: `field "value" is a string, want a number`,
		`not json at all`:                       "invalid character",
		`{"ts":2,"value":3}`:                    `missing "sensor"`,
		`{"sensor":"s-1","ts":3}`:               `missing "value"`,
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	seq := 0
	for v := range bad {
		seq++
		recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", seq)}, &kgo.Record{Key: []byte("s-1"), Value: []byte(v)})
	}
	seq++
	recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", seq)})
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	w := start(t, seqPipeline(addrs, memory.New(), j.as("w")), pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, seq) }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(len(bad)), w.w.Stats().DeadLettered)
	require.Equal(t, uint64(seq), w.w.Stats().RecordsIn)
	require.NoError(t, w.w.Checkpoint(ctx))
	var cursors []string
	for _, s := range w.w.Shards() {
		cursors = append(cursors, s.Checkpoint.LastCursor)
	}
	require.Contains(t, cursors, fmt.Sprintf("%s@%d", streaming.KafkaShard(topic, recs[0].Partition), len(recs)-1),
		"the checkpoint committed past the last record, a good one after the dead letters")

	dl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic+".dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer dl.Close()
	var got []*kgo.Record
	for len(got) < len(bad) && ctx.Err() == nil {
		dl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	require.Len(t, got, len(bad))
	for _, r := range got {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		frag, ok := bad[string(r.Value)]
		require.True(t, ok, "unexpected DLQ value %q", r.Value)
		require.Equal(t, topic, h[kafka.HeaderDLQTopic])
		require.Equal(t, "central", h[kafka.HeaderDLQGroup])
		require.Contains(t, h[kafka.HeaderDLQError], frag)
		require.NotEmpty(t, h[kafka.HeaderDLQOffset])
	}
	j.requireExactlyOnce(t, []string{"s-1"}, seq)
}

// TestRestoreFollowsTheCheckpointNotTheGroup: the checkpoint, not the
// group's committed offset, decides where consumption resumes: a worker
// of another consumer group (nothing committed there) over the same
// durable store starts right after the checkpoint's cursor, and a record
// is never applied twice.
func TestRestoreFollowsTheCheckpointNotTheGroup(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	keys := sensorKeys(6)
	durable := memory.New()
	j := newJournal()
	reg := seqRegistry(t)
	produceSeq(t, addrs, keys, 1, 20)
	a := start(t, seqPipeline(addrs, durable, j.as("a")), pipeline.WithOperators(reg))
	require.Eventually(t, func() bool { return j.allReached(keys, 20) }, 20*time.Second, 5*time.Millisecond)
	a.stop(t)

	produceSeq(t, addrs, keys, 21, 40)
	p := seqPipeline(addrs, durable, j.as("b"))
	src := p.Source.(pipeline.KafkaSource)
	src.Group = "another-group"
	p.Source = src
	b := start(t, p, pipeline.WithOperators(reg))
	require.Eventually(t, func() bool { return j.allReached(keys, 40) }, 20*time.Second, 5*time.Millisecond)
	b.stop(t)
	require.Equal(t, map[string]int{"a": 6 * 20, "b": 6 * 20}, j.byWorker(), "b resumed after a's checkpoint, not at the start of the log")
	j.requireCounted(t, keys, 40) // (epochs restart with the new group's generations)
}

// deadSink keeps the dead letters it is given (copies: Write's slice is
// the runtime's) and counts its flushes.
type deadSink struct {
	mu      sync.Mutex
	got     []streaming.Output
	flushes int
}

func (d *deadSink) Write(_ context.Context, outs []streaming.Output) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, outs...)
	return nil
}

func (d *deadSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	d.mu.Lock()
	d.flushes++
	d.mu.Unlock()
	return nil
}

func (d *deadSink) Close(context.Context) error { return nil }

func (d *deadSink) outputs() ([]streaming.Output, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got), d.flushes
}

// TestDeadLettersGoToTheDeadLetterSink: with Pipeline.DeadLetter set to a
// sink of one's own, a Kafka source's dead letters reach it through the
// streaming.Sink contract, each an Output carrying the record as it came
// and the reason; the other sinks see none, nothing goes to a
// dead-letter topic, and a checkpoint flushes the dead-letter sink with
// the others.
func TestDeadLettersGoToTheDeadLetterSink(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	j := newJournal()
	bad := map[string]string{ // value → expected reason fragment
		`not json at all`:         "invalid character",
		`{"ts":2,"value":3}`:      `missing "sensor"`,
		`{"sensor":"s-1","ts":3}`: `missing "value"`,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	seq := 0
	for v := range bad {
		seq++
		recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: seqReading("s-1", seq)},
			&kgo.Record{Key: []byte("s-1"), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	dead := &deadSink{}
	p := seqPipeline(addrs, memory.New(), j.as("w"))
	p.DeadLetter = pipeline.Use(dead)
	w := start(t, p, pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { got, _ := dead.outputs(); return len(got) == len(bad) }, 20*time.Second, 5*time.Millisecond,
		"the dead letters never reached the sink")
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, seq) }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(len(bad)), w.w.Stats().DeadLettered)
	_, before := dead.outputs()
	require.NoError(t, w.w.Checkpoint(ctx))
	got, after := dead.outputs()
	require.Greater(t, after, before, "the checkpoint's pre-commit flushed the dead-letter sink")

	for _, o := range got {
		require.NotNil(t, o.Dead)
		frag, ok := bad[string(o.Dead.Value)]
		require.True(t, ok, "unexpected dead letter %q", o.Dead.Value)
		require.Equal(t, topic, o.Topic)
		require.Equal(t, "s-1", string(o.Dead.Key))
		require.Equal(t, "central", o.Dead.Group)
		require.Equal(t, []streaming.Header{{Key: "origin", Value: []byte("test")}}, o.Dead.Headers)
		require.ErrorContains(t, o.Dead.Err, frag)
		require.Equal(t, recs[o.Offset].Value, o.Dead.Value, "the offset is the record's")
		require.Equal(t, streaming.KafkaShard(topic, o.Dead.Partition), o.Shard)
	}
	j.requireExactlyOnce(t, []string{"s-1"}, seq) // the journal (a sink) saw no dead letter

	// Nothing went to the dead-letter topic (the cluster has one).
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic+".dlq")
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		require.Zero(t, o.Offset, "records on %s/%d", o.Topic, o.Partition)
	})
	require.NotEmpty(t, ends, "the dead-letter topic's partitions were listed")
}

// TestUnreachableKafkaIsTheSourcesError: with no dead-letter sink of its
// own, a pipeline's worker opens without reaching Kafka (its default
// dead-letter sink connects when it first produces), and an unreachable
// cluster is reported once, by the source, naming its group — not as a
// dead-letter producer the user never configured.
func TestUnreachableKafkaIsTheSourcesError(t *testing.T) {
	port, err := loopport.PickPort()
	require.NoError(t, err)
	p := seqPipeline([]string{"127.0.0.1:" + strconv.Itoa(port)}, memory.New())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := pipeline.NewWorker(ctx, p, pipeline.WithOperators(seqRegistry(t)), pipeline.WithLogger(testLogger(t)))
	require.NoError(t, err, "the worker opens without Kafka")
	err = w.Run(ctx)
	require.ErrorContains(t, err, `kafka source (group "central"): connect`)
	require.NotContains(t, err.Error(), "dead-letter")
}
