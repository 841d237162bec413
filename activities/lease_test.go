package activities_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
)

// heldHost is a ShardHost that only lists the shards it holds.
type heldHost struct {
	activities.ShardHost
	held []activities.HeldShard
}

func (h heldHost) Held() []activities.HeldShard { return h.held }

// lostKeeper is a LeaseKeeper whose leases are lost.
type lostKeeper struct{ err error }

func (k lostKeeper) Err() error { return k.err }

// TestKeepLeasesLostLeasesCarryTheHeldShards: the lease activity of a
// worker whose leases are lost ends with an ErrTypeLeasesLost error that
// names the worker and the cause and carries the shards the worker
// holds, which the lease workflow keeps for a worker that dies before
// the restarted activity heartbeats.
func TestKeepLeasesLostLeasesCarryTheHeldShards(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	held := []activities.HeldShard{{Pipeline: "iot", Shard: "readings-1", Epoch: 7, TaskQueue: "tflo-worker-w1", WorkerID: "w1"}}
	env.RegisterActivity(&activities.Leases{Host: heldHost{held: held}, Keeper: lostKeeper{errors.New("leases expired")}})
	_, err := env.ExecuteActivity((&activities.Leases{}).KeepLeases, activities.LeaseInput{WorkerID: "w1", Interval: time.Second})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	require.Equal(t, activities.ErrTypeLeasesLost, app.Type())
	require.False(t, app.NonRetryable())
	require.ErrorContains(t, err, `worker "w1": leases lost: leases expired`)
	var got []activities.HeldShard
	require.NoError(t, app.Details(&got))
	require.Equal(t, held, got)
}
