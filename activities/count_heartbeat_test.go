package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
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
	dir := t.TempDir()
	arc, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	for s := range int32(80) {
		shardFiles(t, arc, "iot", s, 2, 5)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	b := &activities.Backfills{Archives: func(string) (parquet.Archive, string, error) {
		return slowArchive{arc, 3 * time.Millisecond}, "", nil
	}}
	env.RegisterActivity(b)
	env.RegisterWorkflow(countWorkflow)
	env.SetTestTimeout(2 * time.Minute)
	env.ExecuteWorkflow(countWorkflow, activities.CountArchiveInput{Location: "file://" + dir}, time.Second)
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
	dir := t.TempDir()
	arc, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	for s := range int32(80) {
		shardFiles(t, arc, "iot", s, 1, 2)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	b := &activities.Backfills{Archives: func(string) (parquet.Archive, string, error) {
		return slowLister{arc, 20 * time.Millisecond}, "", nil
	}}
	env.RegisterActivity(b)
	env.RegisterWorkflow(listWorkflow)
	env.SetTestTimeout(2 * time.Minute)
	env.ExecuteWorkflow(listWorkflow, activities.ListPartitionsInput{Location: "file://" + dir}, time.Second)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "a healthy, slow archive of 80 partitions fails its listing on heartbeat timeouts")
	var res activities.ListPartitionsResult
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Len(t, res.Partitions, 80)
	assert.False(t, res.More)
}
