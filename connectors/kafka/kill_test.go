package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMemberKilledWithoutLeave: a member is cut off the network after a
// checkpoint and after applying more records (no LeaveGroup, no final
// commit). When its session expires the survivor takes its partitions,
// restores the victim's last durable checkpoint and replays what came
// after; the durable state ends exact. The victim, still running as a
// zombie, is then closed: its final checkpoint is fenced by the
// survivor's later epoch and changes nothing.
func TestMemberKilledWithoutLeave(t *testing.T) {
	const parts, perPhase = 4, 50
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(16)
	g := seqGraph(t)
	store := memory.New()
	j := &journal{}

	cut := &faults.Net{}
	victim := startMember(t, "victim", memberOpts(addrs, g, store, j, "victim",
		WithRevokeTimeout(2*time.Second),
		WithClientOptions(kgo.Dialer(cut.Dial), kgo.RetryTimeout(2*time.Second), kgo.RequestTimeoutOverhead(time.Second),
			kgo.SessionTimeout(2*time.Second)))...)
	survivor := startMember(t, "survivor", memberOpts(addrs, g, store, j, "survivor")...)
	require.Eventually(t, func() bool {
		return victim.src.Stats().Owned > 0 && survivor.src.Stats().Owned > 0 &&
			victim.src.Stats().Owned+survivor.src.Stats().Owned == parts
	}, 20*time.Second, 10*time.Millisecond)

	produceReadings(t, addrs, keys, 1, perPhase)
	require.Eventually(t, func() bool { return j.allReached(keys, perPhase) }, 20*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, victim.src.Checkpoint(ctx))
	victimOwned := victim.src.Router().Owned()
	var zombieCP *streaming.Checkpointer
	for p := range victimOwned {
		zombieCP, _, _ = victim.src.Checkpointer(p)
		break
	}
	require.NotNil(t, zombieCP)

	// The victim applies records past its checkpoint, then dies.
	produceReadings(t, addrs, keys, perPhase+1, 2*perPhase)
	require.Eventually(t, func() bool { return j.allReached(keys, 2*perPhase) }, 20*time.Second, 5*time.Millisecond)
	beforeCut := j.byMember()["victim"]
	cut.Cut()

	// The survivor inherits every partition after the victim's session times out.
	require.Eventually(t, func() bool { return survivor.src.Stats().Owned == parts }, 30*time.Second, 20*time.Millisecond)
	for p := range victimOwned {
		_, ok := survivor.src.Router().GainedAt(p)
		require.True(t, ok, "survivor does not own %s", p)
	}
	require.Positive(t, survivor.src.Stats().RestoredDurable, "survivor restored nothing from the victim's checkpoint")
	produceReadings(t, addrs, keys, 2*perPhase+1, 3*perPhase)
	total := 3 * perPhase
	require.Eventually(t, func() bool { return j.allReached(keys, total) }, 30*time.Second, 10*time.Millisecond)
	require.Positive(t, beforeCut)
	require.NoError(t, survivor.src.Checkpoint(ctx))
	// A zombie checkpoint of a partition the survivor now owns is fenced:
	// locally if the victim already saw the loss, else by the survivor's
	// later epoch on the stored manifest.
	_, err := zombieCP.Checkpoint(ctx)
	require.ErrorIs(t, err, streaming.ErrFenced)

	// The zombie closes: whatever it tries to write must not change the
	// survivor's state.
	checkpointsBefore := victim.src.Stats().Checkpoints
	require.NoError(t, victim.src.Close())
	<-victim.done
	vs := victim.src.Stats()
	t.Logf("victim after close: %+v", vs)
	require.Equal(t, checkpointsBefore, vs.Checkpoints, "the zombie completed a checkpoint after it was replaced")
	survivor.stop(t)
	j.requireOneOwnerPerEpoch(t)

	state := durableState(t, store, g, "central", parts)
	require.Len(t, state, len(keys))
	for _, k := range keys {
		st := state[k]
		require.Equal(t, int64(total), st.count, "key %s: records applied to durable state", k)
		require.Zero(t, st.violations, "key %s: records lost or applied twice", k)
	}
	// The replay really happened: the victim's post-checkpoint records
	// were applied again by the survivor.
	j.mu.Lock()
	applied := len(j.events)
	j.mu.Unlock()
	require.Greater(t, applied, total*len(keys), "no record was replayed after the kill")
}
