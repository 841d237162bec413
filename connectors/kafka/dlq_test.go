package kafka

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDeadLetters: malformed records among good ones go to the DLQ topic
// with headers naming their source and the error; the good ones are
// applied, the counter rises, and the checkpoint commits past the bad
// ones.
func TestDeadLetters(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	g := seqGraph(t)
	store := memory.New()
	j := &journal{}

	bad := map[string]string{ // value -> expected error fragment
		`{"sensor":"s-1","ts":1,"value":"hot"}`: "cannot unmarshal",
		`not json at all`:                       "invalid character",
		`{"ts":2,"value":3}`:                    `missing "sensor"`,
		`{"sensor":"s-1","ts":3}`:               `missing "value"`,
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("readings"))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	seq := 0
	for v := range bad {
		seq++
		recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", seq)}, &kgo.Record{Key: []byte("s-1"), Value: []byte(v)})
	}
	seq++
	recs = append(recs, &kgo.Record{Key: []byte("s-1"), Value: reading("s-1", seq)})
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	m := startMember(t, "m", memberOpts(addrs, g, store, j, "m")...)
	require.Eventually(t, func() bool { return j.allReached([]string{"s-1"}, seq) }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(len(bad)), m.src.Stats().DeadLettered)
	require.Equal(t, uint64(seq), m.src.Stats().Applied)
	require.NoError(t, m.src.Checkpoint(ctx))

	// Read the DLQ.
	dl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("readings.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer dl.Close()
	var got []*kgo.Record
	for len(got) < len(bad) && ctx.Err() == nil {
		dl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	// Dead letters are at least once (a replay after a crash sends them
	// again); each carries its source position, so count distinct sources.
	sources := map[string]int{}
	for _, r := range got {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		frag, ok := bad[string(r.Value)]
		require.True(t, ok, "unexpected DLQ value %q", r.Value)
		require.Equal(t, "readings", h[HeaderDLQTopic])
		require.Equal(t, "central", h[HeaderDLQGroup])
		require.Contains(t, h[HeaderDLQError], frag)
		p, err := strconv.Atoi(h[HeaderDLQPartition])
		require.NoError(t, err)
		off, err := strconv.ParseInt(h[HeaderDLQOffset], 10, 64)
		require.NoError(t, err)
		// The headers point at the original record.
		orig := fetchAt(t, addrs, "readings", int32(p), off)
		require.Equal(t, string(r.Value), string(orig.Value))
		require.True(t, strings.HasPrefix(h[HeaderDLQError], "decode record readings/"), h[HeaderDLQError])
		sources[h[HeaderDLQPartition]+"@"+h[HeaderDLQOffset]]++
	}
	require.Len(t, sources, len(bad), "dead letters for distinct source records")
	if len(got) != len(bad) {
		var offs []int64
		for _, r := range got {
			offs = append(offs, r.Offset)
		}
		t.Logf("DLQ holds %d records for %d bad ones (DLQ offsets %v)", len(got), len(bad), offs)
	}
	m.stop(t)
	requireCommitted(t, addrs, "central", 2)
}

func fetchAt(t *testing.T, addrs []string, topic string, p int32, off int64) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(off)}}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		recs := cl.PollFetches(ctx).Records()
		if len(recs) > 0 {
			require.Equal(t, off, recs[0].Offset)
			return recs[0]
		}
	}
	t.Fatalf("no record at %s/%d@%d", topic, p, off)
	return nil
}
