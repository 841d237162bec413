package central

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/tflo-io/tflo/activities"
)

// leases is activities.Leases whose KeepLeases also ends when the
// Temporal worker stops (a graceful shutdown), so the activity completes
// and the lease workflow ends as stopped instead of timing out and
// handing the shards off as if the worker had died. Registered under the
// same activity name, KeepLeases.
type leases struct {
	activities.Leases
}

// KeepLeases runs activities.Leases.KeepLeases until the worker stops.
func (l *leases) KeepLeases(ctx context.Context, in activities.LeaseInput) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := activity.GetWorkerStopChannel(ctx)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return l.Leases.KeepLeases(ctx, in)
}
