package kafka

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func memberOpts(addrs []string, g *streaming.Graph, store streaming.StateStore, j *journal, name string, extra ...SourceOption) []SourceOption {
	return append([]SourceOption{
		WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"),
		WithGraph(g), WithStateStore(store), WithOnApply(j.hook(name)),
		// A long session: a loaded test machine must not expire healthy
		// members (that would be a correct but unplanned replay). Tests of
		// dead members shorten it for the victim.
		WithClientOptions(kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)),
	}, extra...)
}

// TestRebalanceMidStream: members join while a producer keeps writing;
// cooperative rebalances move partitions with a final checkpoint on the
// old owner and a restore on the new one. At the end the durable state of
// every key has seen every record exactly once, no record was applied
// twice (none replayed), and no key was applied by two members in one
// epoch.
func TestRebalanceMidStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
	}{
		{"two members", 2},
		{"three members", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const parts, total = 6, 300
			c := newCluster(t, parts)
			addrs := c.ListenAddrs()
			keys := sensorKeys(24)
			g := seqGraph(t)
			store := memory.New()
			j := &journal{}

			// A steady stream: one seq of every key per produce call.
			produced := make(chan struct{})
			go func() {
				defer close(produced)
				for seq := 1; seq <= total; seq++ {
					if err := tryProduceReadings(addrs, keys, seq, seq); err != nil {
						t.Errorf("produce seq %d: %v", seq, err)
						return
					}
				}
			}()
			minSeq := func() int64 {
				m := j.maxSeq()
				lo := int64(total)
				for _, k := range keys {
					lo = min(lo, m[k])
				}
				return lo
			}
			ms := []*member{startMember(t, "m0", memberOpts(addrs, g, store, j, "m0")...)}
			for i := 1; i < tc.members; i++ {
				// Join when the stream is i/(members+1) of the way through.
				at := int64(total * i / (tc.members + 1))
				require.Eventually(t, func() bool { return minSeq() >= at }, 30*time.Second, 2*time.Millisecond)
				name := "m" + strconv.Itoa(i)
				ms = append(ms, startMember(t, name, memberOpts(addrs, g, store, j, name)...))
				require.Eventually(t, func() bool { return ms[i].src.Stats().Owned > 0 }, 20*time.Second, 2*time.Millisecond)
			}
			<-produced
			require.Eventually(t, func() bool { return j.allReached(keys, total) }, 30*time.Second, 10*time.Millisecond)
			// The joins happened mid-stream: records were still arriving
			// after the last member took over partitions.
			for _, m := range ms {
				require.Positive(t, j.byMember()[m.name], "member %s applied nothing", m.name)
			}
			require.Positive(t, ms[0].src.Stats().Checkpoints, "the first member never ran a final checkpoint on revoke")
			for _, m := range ms {
				m.stop(t)
			}
			j.requireOneOwnerPerEpoch(t)
			j.mu.Lock()
			require.Len(t, j.events, total*len(keys), "records applied (a replay or a loss)")
			j.mu.Unlock()

			state := durableState(t, store, g, "central", parts)
			require.Len(t, state, len(keys))
			for _, k := range keys {
				st := state[k]
				require.Equal(t, int64(total), st.count, "key %s: records applied to durable state", k)
				require.Equal(t, int64(total), st.last, "key %s", k)
				require.Zero(t, st.violations, "key %s: records lost or applied twice", k)
			}
			requireCommitted(t, addrs, "central", parts)
		})
	}
}

// requireCommitted checks that the cursor stage committed every partition
// to its end: the group's offsets equal the log end offsets.
func requireCommitted(t *testing.T, addrs []string, group string, parts int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	cs := NewGroupCursorStore(cl, group)
	ends := endOffsets(t, cl, "readings", parts)
	for p := range parts {
		part := Partition{"readings", p}
		rec, err := cs.LoadCursor(context.Background(), []byte(ShardName(group, part)))
		if ends[p] == 0 {
			continue
		}
		require.NoError(t, err, "partition %s", part)
		off, err := streaming.ParseKafkaOffset(rec.Cursor)
		require.NoError(t, err)
		require.Equal(t, ends[p], off.Next(), "partition %s: committed position", part)
	}
}

func endOffsets(t *testing.T, cl *kgo.Client, topic string, parts int32) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	out := map[int32]int64{}
	for _, t2 := range resp.Topics {
		for _, p := range t2.Partitions {
			require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
			out[p.Partition] = p.Offset
		}
	}
	return out
}

func TestShardNameRoundTrip(t *testing.T) {
	for _, p := range []Partition{{"readings", 0}, {"a.b-c_d", 17}, {"x/y", 3}} {
		got, err := parseShardName("g", ShardName("g", p))
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	for _, bad := range []string{"kafka/other/t/1", "kafka/g/t/x", "kafka/g/t/-1", "kafka/g/1"} {
		_, err := parseShardName("g", bad)
		require.Error(t, err, bad)
	}
	_ = fmt.Sprint()
}

// TestCheckpointInterval: with WithCheckpointInterval the member
// checkpoints by itself while running; the group's committed offsets reach
// the end of the log before the member stops.
func TestCheckpointInterval(t *testing.T) {
	c := newCluster(t, 2)
	addrs := c.ListenAddrs()
	keys := sensorKeys(4)
	j := &journal{}
	produceReadings(t, addrs, keys, 1, 25)
	m := startMember(t, "m", memberOpts(addrs, seqGraph(t), memory.New(), j, "m", WithCheckpointInterval(20*time.Millisecond))...)
	require.Eventually(t, func() bool { return j.allReached(keys, 25) }, 20*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return m.src.Stats().Checkpoints >= 4 }, 20*time.Second, 5*time.Millisecond)
	// Committed while running, not only by the final checkpoint.
	require.Eventually(t, func() bool { return committedAtEnd(t, addrs, "central", 2) }, 20*time.Second, 20*time.Millisecond)
	m.stop(t)
}

func committedAtEnd(t *testing.T, addrs []string, group string, parts int32) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	cs := NewGroupCursorStore(cl, group)
	ends := endOffsets(t, cl, "readings", parts)
	for p := range parts {
		rec, err := cs.LoadCursor(context.Background(), []byte(ShardName(group, Partition{"readings", p})))
		if err != nil {
			return false
		}
		off, err := streaming.ParseKafkaOffset(rec.Cursor)
		if err != nil || off.Next() != ends[p] {
			return false
		}
	}
	return true
}

// TestRunStoppedBeforeConnectingIsClean: a Source whose context ends
// while it is still connecting owned nothing; Run returns nil (a requested
// stop), while an unreachable cluster under a live context is an error.
func TestRunStoppedBeforeConnectingIsClean(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	newSrc := func() *Source {
		s, err := NewSource(WithBrokers(addr), WithGroup("g"), WithTopics("readings"), WithStateStore(memory.New()),
			WithGraph(seqGraph(t)), WithClientOptions(kgo.RetryTimeout(500*time.Millisecond), kgo.DialTimeout(200*time.Millisecond)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, newSrc().Run(ctx), "stopped before connecting")

	live, liveCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer liveCancel()
	err = newSrc().Run(live)
	require.Error(t, err, "an unreachable cluster is an error")
	require.ErrorContains(t, err, `kafka source (group "g"): connect`)
}
