package kafka

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// seqCheck is a test operator that expects, per key, the values 1, 2, 3,
// ...: it counts records and counts every value that is not last+1 as a
// violation, so a lost record or a record applied twice shows in its
// state.
type seqCheck struct {
	streaming.Base
	last, count, violations int64
}

func (*seqCheck) Name() string        { return "seqcheck" }
func (*seqCheck) TypeVersion() uint32 { return 1 }
func (o *seqCheck) Reset()            { *o = seqCheck{} }
func (o *seqCheck) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	v := in[0].Int64()
	if v != o.last+1 {
		o.violations++
	}
	o.last = v
	o.count++
	return streaming.Int(o.count)
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

func seqGraph(t testing.TB) *streaming.Graph {
	g, err := streaming.NewBuilder().Input("value").
		Node("check", func() streaming.Operator { return &seqCheck{} }, "value").Build()
	require.NoError(t, err)
	return g
}

func newCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, "readings", "readings.dlq"),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(all...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func reading(sensor string, seq int) []byte {
	return fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%d}`, sensor, 1_700_000_000_000+int64(seq), seq)
}

// produceReadings writes seqs [from, to] of every key, keyed by sensor.
func produceReadings(t testing.TB, addrs []string, keys []string, from, to int) {
	t.Helper()
	require.NoError(t, tryProduceReadings(addrs, keys, from, to))
}

// tryProduceReadings is produceReadings for goroutines other than the
// test's (which must not call FailNow).
func tryProduceReadings(addrs []string, keys []string, from, to int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for seq := from; seq <= to; seq++ {
		for _, k := range keys {
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: reading(k, seq)})
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

// event is one record applied by one member.
type event struct {
	member string
	p      Partition
	key    string
	seq    int64
	epoch  streaming.Epoch
}

// journal records every applied record of every member.
type journal struct {
	mu     sync.Mutex
	events []event
}

func (j *journal) hook(member string) func(*Applied) {
	return func(a *Applied) {
		seq := int64(-1)
		if a.Instance != nil {
			if v, ok := a.Instance.Value("value"); ok {
				seq = v.Int64()
			}
		}
		j.mu.Lock()
		j.events = append(j.events, event{member, a.Partition, a.Key, seq, a.Epoch})
		j.mu.Unlock()
	}
}

// maxSeq returns the highest seq applied per key.
func (j *journal) maxSeq() map[string]int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	m := map[string]int64{}
	for _, e := range j.events {
		m[e.key] = max(m[e.key], e.seq)
	}
	return m
}

func (j *journal) allReached(keys []string, n int) bool {
	m := j.maxSeq()
	for _, k := range keys {
		if m[k] < int64(n) {
			return false
		}
	}
	return true
}

func (j *journal) byMember() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	m := map[string]int{}
	for _, e := range j.events {
		m[e.member]++
	}
	return m
}

// requireOneOwnerPerEpoch fails if a key was applied by two members under
// the same epoch.
func (j *journal) requireOneOwnerPerEpoch(t *testing.T) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	owner := map[string]string{}
	for _, e := range j.events {
		k := fmt.Sprintf("%s@%d", e.key, e.epoch)
		if o, ok := owner[k]; ok && o != e.member {
			t.Fatalf("key %s processed by %s and %s in epoch %d", e.key, o, e.member, e.epoch)
		}
		owner[k] = e.member
	}
}

type member struct {
	name string
	src  *Source
	done chan error
}

func startMember(t *testing.T, name string, opts ...SourceOption) *member {
	t.Helper()
	src, err := NewSource(opts...)
	require.NoError(t, err)
	m := &member{name: name, src: src, done: make(chan error, 1)}
	go func() { m.done <- src.Run(context.Background()) }()
	t.Cleanup(func() { _ = src.Close() })
	return m
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, m.src.Close())
	select {
	case err := <-m.done:
		require.NoError(t, err, "member %s", m.name)
	case <-time.After(30 * time.Second):
		t.Fatalf("member %s did not stop", m.name)
	}
}

// durableState restores every partition's durable checkpoint into a
// Keyed and returns each key's seqCheck state.
func durableState(t *testing.T, store streaming.StateStore, g *streaming.Graph, group string, partitions int32) map[string]seqCheck {
	t.Helper()
	out := map[string]seqCheck{}
	src := &Source{cfg: sourceConfig{graph: g, pieceBytes: 1 << 20}, router: NewKafkaShardRouter()}
	for p := range partitions {
		part := Partition{"readings", p}
		w := newPartition(src, part, 0)
		cs := &cutSource{w: w, name: "check"}
		cp, err := streaming.NewCheckpointer(ShardName(group, part), cs, store, nopCursorStore{})
		require.NoError(t, err)
		if _, err := cp.Restore(context.Background()); errors.Is(err, streaming.ErrNotFound) {
			continue
		} else {
			require.NoError(t, err, "restore %s", part)
		}
		for key, in := range w.keyed.All() {
			_, dup := out[key]
			require.False(t, dup, "key %s stored in two partitions", key)
			out[key] = *in.Operator("check").(*seqCheck)
		}
	}
	return out
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// kfakeTopic seeds one more topic with one partition.
func kfakeTopic(name string) kfake.Opt { return kfake.SeedTopics(1, name) }
