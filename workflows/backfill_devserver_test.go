package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestBackfillFiftyThousandFilesOnDevServer (issue 13, section 6): a
// backfill of an archive listing 50,000 files (1,000 partitions of 50)
// runs on a real dev server over stand-in activities, and every run of
// its continue-as-new chain stays far under Temporal's history limits
// (51,200 events, 50 MB) and every payload under the 2 MB blob limit.
// Before partition paging, the whole listing travelled in one activity
// result and about 8,500 files was the most a backfill could take.
func TestBackfillFiftyThousandFilesOnDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const parts, perPart = 1000, 50
	f := newFakeArchive(parts, perPart, 256)
	for _, p := range f.names {
		f.files[p] = perPart
	}
	ctl := worker.New(c, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	bw := worker.New(c, workflows.BackfillTaskQueue, worker.Options{})
	reg := func(fn any, name string) { bw.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(context.Context, activities.CountArchiveInput) (activities.ArchiveTotals, error) {
		return f.totals(), nil
	}, "CountArchive")
	reg(f.listPartitions, "ListPartitions")
	reg(f.replay, "ReplayPartition")
	require.NoError(t, bw.Start())
	t.Cleanup(bw.Stop)

	in := workflows.BackfillInput{Name: "fifty-k", Location: "s3://archive/iot", Sink: "influx:replay/autogen", Window: 8, FilesPerActivity: 50}
	id := workflows.BackfillWorkflowID(in.Name)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.ControlTaskQueue}, workflows.BackfillWorkflow, in)
	require.NoError(t, err)
	var p workflows.BackfillProgress
	require.NoError(t, run.Get(ctx, &p))
	require.True(t, p.Done)
	require.Equal(t, parts*perPart, p.FilesDone)
	require.Equal(t, parts, p.PartitionsDone)
	require.False(t, f.overlap)
	require.Greater(t, p.Runs, 1, "1,000 replay activities continue as new at least once")

	// Walk the chain of runs back from the last: events and payload sizes.
	maxEvents, maxPayload, runs := 0, 0, 0
	for runID := run.GetRunID(); runID != ""; {
		runs++
		events, prev := 0, ""
		for _, ev := range temporaltest.History(t, ctx, c, id, runID) {
			events++
			maxPayload = max(maxPayload, proto.Size(ev))
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
				prev = a.GetContinuedExecutionRunId()
			}
		}
		maxEvents = max(maxEvents, events)
		runID = prev
	}
	require.Equal(t, p.Runs, runs)
	t.Logf("50,000 files, 1,000 partitions: %d runs, at most %d events per run, largest event %d bytes", runs, maxEvents, maxPayload)
	require.Less(t, maxEvents, 10_000, "a run's history stays under Temporal's 10,240-event warning")
	require.Less(t, maxPayload, 256<<10, "no event comes near the 2 MB payload limit")
}
