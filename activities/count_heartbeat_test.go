package activities_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
)

// slowArchive adds a round trip to every read, as an object store does
// (each ReadAt of a footer is a ranged GET).
type slowArchive struct {
	parquet.Archive
	rtt time.Duration
}

type slowObject struct {
	parquet.Object
	rtt time.Duration
}

func (a slowArchive) Open(ctx context.Context, name string) (parquet.Object, error) {
	time.Sleep(a.rtt)
	o, err := a.Archive.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return slowObject{o, a.rtt}, nil
}

func (o slowObject) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(o.rtt)
	return o.Object.ReadAt(p, off)
}

// countWorkflow runs CountArchive with the backfill's options for it
// (workflows.BackfillWorkflow's "short" context), the heartbeat timeout
// scaled from 1 min to hb.
func countWorkflow(ctx workflow.Context, in activities.CountArchiveInput, hb time.Duration) (activities.ArchiveTotals, error) {
	var b *activities.Backfills
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: hb,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
	})
	var t activities.ArchiveTotals
	err := workflow.ExecuteActivity(ctx, b.CountArchive, in).Get(ctx, &t)
	return t, err
}

// TestCountArchiveHeartbeatsPerPartition: CountArchive opens the first
// and last file of every partition (footer reads: round trips on S3), so
// it heartbeats per partition. Before, it heartbeat once per 10,000 files
// listed, and an archive of fewer files in many partitions never did: 400 partitions of 20 files take 800 footer checks, at 3
// ranged GETs of ~30 ms each about 72 s, past the 1-minute heartbeat
// timeout the backfill gives it; each of the 5 attempts starts from
// scratch (its heartbeat detail is not read back) and the backfill fails
// before it wrote anything. Scaled here: 3 ms per read, 1 s heartbeat
// timeout, 80 partitions of 2 files.
func TestCountArchiveHeartbeatsPerPartition(t *testing.T) {
	loc, arc := shardedArchive(t, 80, 2, 5)
	env := slowArchiveEnv(slowArchive{arc, 3 * time.Millisecond}, countWorkflow)
	env.ExecuteWorkflow(countWorkflow, activities.CountArchiveInput{Location: loc}, time.Second)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "a healthy, slow archive of 160 files fails its count on heartbeat timeouts")
	var tot activities.ArchiveTotals
	require.NoError(t, env.GetWorkflowResult(&tot))
	assert.Equal(t, 80, tot.Partitions)
}

// slowLister adds a round trip to every listing request.
type slowLister struct {
	parquet.Archive
	rtt time.Duration
}

func (a slowLister) List(ctx context.Context, prefix string) ([]parquet.ObjectInfo, error) {
	time.Sleep(a.rtt)
	return a.Archive.List(ctx, prefix)
}

// listWorkflow runs ListPartitions with the backfill's options for it
// (the "short" context), the heartbeat timeout scaled to hb.
func listWorkflow(ctx workflow.Context, in activities.ListPartitionsInput, hb time.Duration) (activities.ListPartitionsResult, error) {
	var b *activities.Backfills
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: hb,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
	})
	var res activities.ListPartitionsResult
	err := workflow.ExecuteActivity(ctx, b.ListPartitions, in).Get(ctx, &res)
	return res, err
}

// TestListPartitionsHeartbeatsPerPartition: ListPartitions makes one
// listing request per partition (257 for a page), which the backfill runs
// with a 1-minute heartbeat timeout. Bug: it never heartbeated, so a page
// of partitions on a slow store (or a large local folder, walked whole
// for each request) took past the timeout, and after 5 attempts the
// backfill failed. Scaled here: 20 ms per request, 1 s heartbeat
// timeout, 80 partitions.
func TestListPartitionsHeartbeatsPerPartition(t *testing.T) {
	loc, arc := shardedArchive(t, 80, 1, 2)
	env := slowArchiveEnv(slowLister{arc, 20 * time.Millisecond}, listWorkflow)
	env.ExecuteWorkflow(listWorkflow, activities.ListPartitionsInput{Location: loc}, time.Second)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "a healthy, slow archive of 80 partitions fails its listing on heartbeat timeouts")
	var res activities.ListPartitionsResult
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Len(t, res.Partitions, 80)
	assert.False(t, res.More)
}

// countWorkflowLimited runs CountArchive as the backfill does, each
// attempt limited to run (the backfill's 10 minutes, scaled).
func countWorkflowLimited(ctx workflow.Context, in activities.CountArchiveInput, run, hb time.Duration) (activities.ArchiveTotals, error) {
	var b *activities.Backfills
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           "count-resume",
		StartToCloseTimeout: run, HeartbeatTimeout: hb,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumInterval: 500 * time.Millisecond, MaximumAttempts: 12},
	})
	var t activities.ArchiveTotals
	err := workflow.ExecuteActivity(ctx, b.CountArchive, in).Get(ctx, &t)
	return t, err
}

// TestCountArchiveResumesFromHeartbeat: a count that takes longer than
// an attempt may run (the backfill gives CountArchive 10 minutes) goes on
// where the last attempt's heartbeat left it, and counts every file
// once. Before, its heartbeat held only a file count, never read back:
// every attempt started over, timed out at the same point, and the
// backfill failed before it wrote anything. Scaled here, on a dev server
// (the test suite does not retry an attempt that timed out): 5 ms per
// read, 2 s per attempt, a count of several seconds.
func TestCountArchiveResumesFromHeartbeat(t *testing.T) {
	loc, arc := shardedArchive(t, 80, 2, 5)
	srv := temporaltest.Start(t)
	var attempts atomic.Int32
	b := &activities.Backfills{Archives: func(string) (parquet.Archive, string, error) {
		attempts.Add(1)
		return slowArchive{arc, 5 * time.Millisecond}, "", nil
	}}
	w := worker.New(srv.Client, "count-resume", worker.Options{})
	w.RegisterActivity(b)
	w.RegisterWorkflow(countWorkflowLimited)
	require.NoError(t, w.Start())
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "count-resume"},
		countWorkflowLimited, activities.CountArchiveInput{Location: loc}, 2*time.Second, 500*time.Millisecond)
	require.NoError(t, err)
	var tot activities.ArchiveTotals
	require.NoError(t, run.Get(ctx, &tot), "a count longer than an attempt never finishes")
	assert.Greater(t, attempts.Load(), int32(1), "the count outlasted an attempt")
	t.Logf("%d attempts", attempts.Load())
	objs, err := arc.List(context.Background(), "")
	require.NoError(t, err)
	var size int64
	for _, o := range objs {
		if _, hidden := parquet.SkipHidden(o.Name); !hidden {
			size += o.Size
		}
	}
	assert.Equal(t, activities.ArchiveTotals{Files: 160, Partitions: 80, Bytes: size}, tot, "every file counted once")
}

// TestCountArchiveGivesUpWithoutProgressForCountStallLimit: an attempt
// of a count whose last heartbeated progress is older than
// activities.CountStallLimit (its attempts since hung on a store that
// does not answer, each ended by the heartbeat timeout) fails for good,
// naming the archive and the last file counted; one whose last progress
// is recent resumes and counts. Before (with the count bounded at an
// hour all attempts together, which also ended a healthy count) there
// was no such limit: raised to a day, a stuck count would retry a day.
func TestCountArchiveGivesUpWithoutProgressForCountStallLimit(t *testing.T) {
	loc, _ := shardedArchive(t, 2, 2, 5)
	env, b := backfillEnv(newMemSink())
	// countProgress as CountArchive heartbeats it: nothing counted yet.
	type progress struct {
		Last string    `json:"last,omitempty"`
		At   time.Time `json:"at"`
	}
	env.SetHeartbeatDetails(progress{Last: "iot/shard-000000/x.parquet", At: time.Now().Add(-activities.CountStallLimit - time.Minute)})
	_, err := env.ExecuteActivity(b.CountArchive, activities.CountArchiveInput{Location: loc})
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, activities.ErrTypeStalled, ae.Type())
	assert.True(t, ae.NonRetryable())
	assert.Contains(t, err.Error(), "count archive "+loc)
	assert.Contains(t, err.Error(), "after file iot/shard-000000/x.parquet")

	env.SetHeartbeatDetails(progress{At: time.Now().Add(-10 * time.Minute)})
	v, err := env.ExecuteActivity(b.CountArchive, activities.CountArchiveInput{Location: loc})
	require.NoError(t, err, "a count that progressed 10 minutes ago goes on")
	var tot activities.ArchiveTotals
	require.NoError(t, v.Get(&tot))
	assert.Equal(t, 4, tot.Files)
}
