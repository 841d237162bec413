package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// announcer is a Temporal client that answers announcements
// (workflows.Announce) and keeps them.
type announcer struct {
	client.Client
	mu  sync.Mutex
	got []workflows.Announcement
}

func (a *announcer) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (a *announcer) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, o.UpdateOptions.Args[0].(workflows.Announcement))
	return announced{}, nil
}

func (a *announcer) announcements() []workflows.Announcement {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]workflows.Announcement(nil), a.got...)
}

type announced struct{ client.WorkflowUpdateHandle }

func (announced) Get(_ context.Context, v any) error {
	*v.(*workflows.AnnounceResult) = workflows.AnnounceResult{Coordinator: "run-1"}
	return nil
}

// TestReleaseOfAShardAnnouncedAgain: a shard announced, then marked to
// be announced again (no round for max_checkpoint_age, a restarted
// coordinator or lease workflow) and released before that announcement
// went out was taken for one never announced: its release was never
// sent, and the coordinator kept it in this worker's rounds.
func TestReleaseOfAShardAnnouncedAgain(t *testing.T) {
	w := &Worker{c: &compiled{p: Pipeline{Name: "plant"}}, o: options{workerID: "w-1"}, log: slog.New(slog.DiscardHandler)}
	w.host = &host{w: w, held: map[streaming.ShardID]*shard{}}
	tc := &announcer{}
	c := newWorkflowControl(w, tc)
	s := &shard{w: w, id: "readings/0", epoch: 3}
	w.host.held[s.id] = s
	c.gained(s)
	require.NoError(t, c.announce(context.Background()))
	c.reannounce()

	delete(w.host.held, s.id) // the source released it (host.lost)
	c.lost(s)
	require.NoError(t, c.announce(context.Background()))
	got := tc.announcements()
	require.Len(t, got, 2)
	require.Equal(t, []activities.ShardEpoch{{Shard: "readings/0", Epoch: 3}}, got[0].Shards)
	require.Empty(t, got[1].Shards)
	require.Equal(t, []activities.ShardEpoch{{Shard: "readings/0", Epoch: 3}}, got[1].Released)

	// A shard released before it was ever announced has nothing to
	// withdraw.
	s2 := &shard{w: w, id: "readings/1", epoch: 4}
	w.host.held[s2.id] = s2
	c.gained(s2)
	delete(w.host.held, s2.id)
	c.lost(s2)
	require.NoError(t, c.announce(context.Background()))
	require.Len(t, tc.announcements(), 2, "nothing to announce")
}
