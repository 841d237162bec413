package kafka

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/streaming"
)

func newCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, "readings", "readings.dlq"),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(all...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// randomBytes is n bytes drawn from rng: they do not compress, so a batch
// of them stays as large as its records.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// deadLetterOutputs is n dead letters of readings/0 (keys s-0 on, offsets
// 0 on), each of 4 KiB of randomBytes.
func deadLetterOutputs(rng *rand.Rand, n int) []streaming.Output {
	outs := make([]streaming.Output, n)
	for i := range outs {
		key := "s-" + strconv.Itoa(i)
		outs[i] = streaming.Output{Shard: streaming.KafkaShard("readings", 0), Offset: int64(i), Topic: "readings", Key: key,
			Dead: &streaming.DeadLetter{Key: []byte(key), Value: randomBytes(rng, 4<<10), Group: "central", Err: errors.New("bad")}}
	}
	return outs
}

func reading(sensor string, seq int) []byte {
	return fmt.Appendf(nil, `{"sensor":%q,"ts":%d,"value":%d}`, sensor, 1_700_000_000_000+int64(seq), seq)
}

// produceReadings writes seqs [from, to] of every key, keyed by sensor.
func produceReadings(t testing.TB, addrs []string, keys []string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for seq := from; seq <= to; seq++ {
		for _, k := range keys {
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: reading(k, seq)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

func sensorKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("sensor-%03d", i)
	}
	return ks
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
