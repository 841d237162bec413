package kafka

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// TestOutputSinkDropsNonFinite is issue 17.1 at the Kafka output sink: a
// NaN or infinite output failed JSON encoding, so Write failed the whole
// batch and the pipeline's sticky sink error failed every later
// checkpoint. The sink drops and counts the bad output and publishes the
// others.
func TestOutputSinkDropsNonFinite(t *testing.T) {
	c := newCluster(t, 1, kfake.SeedTopics(1, "outs"))
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := NewPublisher(ctx, PublishTo("outs", addrs...))
	require.NoError(t, err)
	for _, enc := range []OutputEncoder{ // in this order: the records are checked in it
		JSONOutputs{Scale: 1e6},
		SignalEnvelopes{Trigger: "alarm", Scale: 1e6, Payload: []PayloadField{{"mean", "mean"}}},
	} {
		t.Run("", func(t *testing.T) {
			s := NewOutputSink(pub, enc)
			out := func(key, name string, v float64) streaming.Output {
				return streaming.Output{Key: key, Name: name, Value: v, TS: 1_700_000_000_000 * 1e6, Offset: int64(len(key))}
			}
			outs := []streaming.Output{
				out("a", "alarm", 1), out("a", "mean", 21),
				out("bb", "alarm", 1), out("bb", "mean", math.NaN()),
				out("ccc", "alarm", math.Inf(1)), out("ccc", "mean", 22),
			}
			require.NoError(t, s.Write(ctx, outs))
			require.NoError(t, s.Flush(ctx, "", 0))
			require.Equal(t, uint64(2), s.Dropped())
		})
	}
	pub.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("outs"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var got []string
	for len(got) < 6 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Len(t, got, 6)
	require.Equal(t, []string{
		`{"key":"a","name":"alarm","ts":1700000000000,"value":1}`,
		`{"key":"a","name":"mean","ts":1700000000000,"value":21}`,
		`{"key":"bb","name":"alarm","ts":1700000000000,"value":1}`,
		`{"key":"ccc","name":"mean","ts":1700000000000,"value":22}`,
	}, got[:4])
	require.Contains(t, got[4], `"payload":{"mean":21}`)
	require.Contains(t, got[5], `"payload":{}`, "the NaN mean is left out of bb's envelope")
}

// TestOutputSinkDropLinesAreSampled: every dropped output wrote a Warn
// line, so an operator emitting NaN for every record wrote a line a
// record; the lines are sampled (the first of every interval, the rest
// counted as "suppressed"), and Dropped still counts every one.
func TestOutputSinkDropLinesAreSampled(t *testing.T) {
	c := newCluster(t, 1, kfake.SeedTopics(1, "outs"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lines := logtest.NewCounter("kafka sink: output dropped: its value is not finite")
	pub, err := NewPublisher(ctx, PublishTo("outs", c.ListenAddrs()...), PublisherLogger(lines.Logger()))
	require.NoError(t, err)
	s := NewOutputSink(pub, JSONOutputs{Scale: 1e6})
	defer s.Close(ctx)
	const n = 200
	start := time.Now()
	for i := range n {
		require.NoError(t, s.Write(ctx, []streaming.Output{{Key: "k", Name: "mean", Value: math.NaN(), TS: int64(i)}}))
	}
	lines.RequireSampled(t, n, time.Since(start))
	require.Equal(t, uint64(n), s.Dropped())
}
