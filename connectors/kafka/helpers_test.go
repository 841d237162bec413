package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
