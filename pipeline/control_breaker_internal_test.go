package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/workflows"
)

// TestReannounceWaitsForTheBreakersCoolDown: while the coordinator's
// breaker was open (no rounds until its cool-down ends, on purpose), a
// worker that had no round for max_checkpoint_age announced every held
// shard again each max age: an update in the coordinator's history per
// worker per max age for the whole cool-down. It announces them again
// once the cool-down ended; a shard it gains meanwhile is still
// announced at once. A worker told of the breaker by its announcement's
// answer (it held no shard when the breaker opened, so had no notice)
// waits as well.
func TestReannounceWaitsForTheBreakersCoolDown(t *testing.T) {
	const coolDown = 5 * time.Second
	p := Pipeline{Name: "plant", Checkpoint: Checkpoint{Interval: time.Hour, MaxCheckpointAge: 200 * time.Millisecond, BreakerCoolDown: coolDown}}
	t.Run("told by the notice", func(t *testing.T) {
		reannounceAfterCoolDown(t, p, func(ctx context.Context, _ client.Client, w *Worker) time.Time {
			// The coordinator's notice of its open breaker (Rounds.Notice).
			until := time.Now().Add(coolDown)
			require.NoError(t, w.host.shards.Notice(ctx,
				activities.CoordinatorNotice{Pipeline: p.Name, Breaker: workflows.BreakerOpen, Until: until}))
			return until
		})
	})
	t.Run("told by the announcement's answer", func(t *testing.T) {
		reannounceAfterCoolDown(t, p, func(ctx context.Context, tc client.Client, _ *Worker) time.Time {
			// A coordinator whose breaker opened now, while another
			// worker held the shards.
			openedAt := time.Now()
			in := workflows.CoordinatorInput{Pipeline: p.Name, Interval: activities.Duration(time.Hour), BreakerCoolDown: activities.Duration(coolDown),
				State: &workflows.CoordinatorState{Pipeline: p.Name, Breaker: workflows.BreakerOpen, BreakerOpenedAt: openedAt}}
			_, err := workflows.Announce(ctx, tc, in, workflows.Announcement{WorkerID: "w-0", TaskQueue: workflows.WorkerTaskQueue("w-0"),
				Shards: []activities.ShardEpoch{{Shard: "readings/9", Epoch: 1}}})
			require.NoError(t, err)
			return openedAt.Add(coolDown)
		})
	})
}

// reannounceAfterCoolDown runs a worker of p holding readings/0, told by
// breakerOpened that the coordinator's breaker is open until the time it
// returns, and gaining readings/1 then; it checks that only the gained
// shards are announced before then, each at once, and every held shard
// after.
func reannounceAfterCoolDown(t *testing.T, p Pipeline, breakerOpened func(ctx context.Context, tc client.Client, w *Worker) time.Time) {
	tc := &announcer{Client: coordinatorServer(t)}
	w := handBuiltWorker(p, "w-1")
	c := newWorkflowControl(w, tc)
	ctx, cancel := context.WithCancel(context.Background())
	until := breakerOpened(ctx, tc.Client, w)
	s0 := &shard{w: w, id: "readings/0", epoch: 3}
	w.host.held[s0.id] = s0
	c.gained(s0)
	require.NoError(t, c.announce(ctx))
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
