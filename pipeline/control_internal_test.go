package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// announcer is a Temporal client that keeps the announcements
// (workflows.Announce) it is given, each with when it was sent, and
// answers them itself or, with a Client (a dev server's), passes them on.
type announcer struct {
	client.Client
	mu  sync.Mutex
	got []workflows.Announcement
	at  []time.Time
}

func (a *announcer) NewWithStartWorkflowOperation(o client.StartWorkflowOptions, wf any, args ...any) client.WithStartWorkflowOperation {
	if a.Client != nil {
		return a.Client.NewWithStartWorkflowOperation(o, wf, args...)
	}
	return nil
}

func (a *announcer) UpdateWithStartWorkflow(ctx context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	a.mu.Lock()
	a.got = append(a.got, o.UpdateOptions.Args[0].(workflows.Announcement))
	a.at = append(a.at, time.Now())
	a.mu.Unlock()
	if a.Client != nil {
		return a.Client.UpdateWithStartWorkflow(ctx, o)
	}
	return announced{}, nil
}

func (a *announcer) announcements() []workflows.Announcement {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]workflows.Announcement(nil), a.got...)
}

// sentAt returns when each announcement was sent.
func (a *announcer) sentAt() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

type announced struct{ client.WorkflowUpdateHandle }

func (announced) Get(_ context.Context, v any) error {
	*v.(*workflows.AnnounceResult) = workflows.AnnounceResult{Coordinator: "run-1"}
	return nil
}

// handBuiltWorker is a worker of p, id workerID, with a host and no
// source: a test holds shards by adding them to w.host.held.
func handBuiltWorker(p Pipeline, workerID string) *Worker {
	w := &Worker{c: &compiled{p: p}, o: options{workerID: workerID}, log: slog.New(slog.DiscardHandler)}
	w.host = &host{w: w, pipeline: p.Name, shards: activities.NewShards(), held: map[streaming.ShardID]*shard{}}
	return w
}

// coordinatorServer starts a Temporal dev server and a control worker
// running the workflows (the pipelines' coordinators) on it.
func coordinatorServer(t *testing.T) client.Client {
	srv := temporaltest.Start(t)
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	workflows.Register(ctl)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	return srv.Client
}

// TestReleaseOfAShardAnnouncedAgain: a shard announced, then marked to
// be announced again (no round for max_checkpoint_age, a restarted
// coordinator or lease workflow) and released before that announcement
// went out was taken for one never announced: its release was never
// sent, and the coordinator kept it in this worker's rounds.
func TestReleaseOfAShardAnnouncedAgain(t *testing.T) {
	w := handBuiltWorker(Pipeline{Name: "plant"}, "w-1")
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
