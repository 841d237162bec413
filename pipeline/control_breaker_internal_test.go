package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/workflows"
)

// TestReannounceWaitsForTheBreakersCoolDown: while the coordinator's
// breaker was open (no rounds until its cool-down ends, on purpose), a
// worker that had no round for max_checkpoint_age announced every held
// shard again each max age: an update in the coordinator's history per
// worker per max age for the whole cool-down. It announces them again
// once the cool-down ended; a shard it gains meanwhile is still
// announced at once.
func TestReannounceWaitsForTheBreakersCoolDown(t *testing.T) {
	tc := &announcer{Client: coordinatorServer(t)}
	p := Pipeline{Name: "plant", Checkpoint: Checkpoint{Interval: time.Hour, MaxCheckpointAge: 200 * time.Millisecond}}
	w := handBuiltWorker(p, "w-1")
	c := newWorkflowControl(w, tc)
	s0 := &shard{w: w, id: "readings/0", epoch: 3}
	w.host.held[s0.id] = s0
	c.gained(s0)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, c.announce(ctx)) // starts the coordinator
	// The coordinator's notice of its open breaker (Rounds.Notice).
	until := time.Now().Add(3 * time.Second)
	require.NoError(t, w.host.shards.Notice(ctx,
		activities.CoordinatorNotice{Pipeline: p.Name, Breaker: workflows.BreakerOpen, Until: until}))
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	s1 := &shard{w: w, id: "readings/1", epoch: 3}
	w.host.mu.Lock()
	w.host.held[s1.id] = s1
	w.host.mu.Unlock()
	c.gained(s1)
	require.Eventually(t, func() bool {
		at := tc.sentAt()
		return len(at) > 0 && !at[len(at)-1].Before(until)
	}, 30*time.Second, 10*time.Millisecond, "the held shards were not announced again after the cool-down")

	got, at := tc.announcements(), tc.sentAt()
	var during [][]activities.ShardEpoch
	after := -1
	for i := range got {
		if at[i].Before(until) {
			during = append(during, got[i].Shards)
		} else if after < 0 {
			after = i
		}
	}
	require.Equal(t, [][]activities.ShardEpoch{{{Shard: "readings/0", Epoch: 3}}, {{Shard: "readings/1", Epoch: 3}}}, during,
		"during the cool-down only the gained shards are announced, each at once")
	require.ElementsMatch(t, []activities.ShardEpoch{{Shard: "readings/0", Epoch: 3}, {Shard: "readings/1", Epoch: 3}}, got[after].Shards,
		"after the cool-down every held shard is announced again")
}
