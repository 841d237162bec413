package kafka

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

func memberOpts(addrs []string, g *streaming.Graph, store streaming.StateStore, j *journal, name string, extra ...SourceOption) []SourceOption {
	return append([]SourceOption{
		WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"),
		WithGraph(g), WithStateStore(store), WithOnApply(j.hook(name)),
		WithClientOptions(kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)),
	}, extra...)
}

// TestRebalanceMidStream: members join while a stream flows; cooperative
// rebalances move partitions with a final checkpoint on the old owner and
// a restore on the new one. At the end the durable state of every key
// has seen every record exactly once, and no key was applied by two
// members in one epoch.
func TestRebalanceMidStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
	}{
		{"two members", 2},
		{"three members", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const parts, perPhase = 6, 60
			c := newCluster(t, parts)
			addrs := c.ListenAddrs()
			keys := sensorKeys(24)
			g := seqGraph(t)
			store := memory.New()
			j := &journal{}

			produceReadings(t, addrs, keys, 1, perPhase)
			first := startMember(t, "m0", memberOpts(addrs, g, store, j, "m0")...)
			// The first member is mid-stream when the others join.
			require.Eventually(t, func() bool { return first.src.Stats().Applied > 0 }, 20*time.Second, 5*time.Millisecond)
			ms := []*member{first}
			for i := 1; i < tc.members; i++ {
				name := "m" + strconv.Itoa(i)
				ms = append(ms, startMember(t, name, memberOpts(addrs, g, store, j, name)...))
				produceReadings(t, addrs, keys, perPhase*i+1, perPhase*(i+1))
			}
			total := perPhase * tc.members
			// Every member ends up owning partitions: the rebalance happened.
			require.Eventually(t, func() bool {
				for _, m := range ms {
					if m.src.Stats().Owned == 0 {
						return false
					}
				}
				return true
			}, 20*time.Second, 10*time.Millisecond)
			produceReadings(t, addrs, keys, total+1, total+perPhase)
			total += perPhase
			require.Eventually(t, func() bool { return j.allReached(keys, total) }, 30*time.Second, 10*time.Millisecond)

			for _, m := range ms {
				require.Positive(t, j.byMember()[m.name], "member %s applied nothing", m.name)
			}
			require.Positive(t, first.src.Stats().Checkpoints, "the first member never ran a final checkpoint on revoke")
			for _, m := range ms {
				m.stop(t)
			}
			j.requireOneOwnerPerEpoch(t)
			// With clean handoffs nothing is replayed: each record applied once.
			j.mu.Lock()
			require.Len(t, j.events, total*len(keys))
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
	out := map[int32]int64{}
	// A direct consumer from the start tells us the end of each partition.
	cons, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { out[r.Partition] = max(out[r.Partition], r.Offset+1) })
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
