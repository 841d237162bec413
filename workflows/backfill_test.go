package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/workflows"
)

func newBackfillEnv(t *testing.T, files int) (*testsuite.TestWorkflowEnvironment, *activities.Backfills) {
	t.Helper()
	env := quietSuite().NewTestWorkflowEnvironment()
	a := &activities.Backfills{}
	env.RegisterActivity(a)
	env.RegisterWorkflow(workflows.BackfillWorkflow)
	plan := activities.ListArchiveResult{}
	for i := range files {
		plan.Files = append(plan.Files, activities.ArchiveFile{Name: fmt.Sprintf("f%02d.parquet", i), Rows: 100})
		plan.TotalRows += 100
	}
	env.OnActivity(a.ListArchive, mock.Anything, mock.Anything).Return(plan, nil)
	return env, a
}

var backfillIn = workflows.BackfillInput{Name: "b1", Location: "file:///archive", Sink: "influx", Window: 3}

func TestBackfillSlidingWindow(t *testing.T) {
	env, a := newBackfillEnv(t, 10)
	var mu sync.Mutex
	running, maxRunning := 0, 0
	var order []string
	env.OnActivity(a.ReplayFile, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ReplayFileInput) (activities.ReplayFileResult, error) {
			mu.Lock()
			running++
			if running > maxRunning {
				maxRunning = running
			}
			order = append(order, in.File)
			mu.Unlock()
			defer func() { mu.Lock(); running--; mu.Unlock() }()
			return activities.ReplayFileResult{File: in.File, Rows: 100, Written: 100}, nil
		})
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var p workflows.BackfillProgress
	require.NoError(t, env.GetWorkflowResult(&p))
	assert.True(t, p.Done)
	assert.Equal(t, 10, p.FilesDone)
	assert.Equal(t, 10, p.FilesTotal)
	assert.Equal(t, int64(1000), p.RowsDone)
	assert.Equal(t, int64(1000), p.Written)
	assert.LessOrEqual(t, maxRunning, 3, "never more than Window replays at once")
	assert.Len(t, order, 10)
	// The status query answers from the same state (queried after the end:
	// a mid-run query races the activities' real goroutines in the test env).
	v, err := env.QueryWorkflow(workflows.QueryStatus)
	require.NoError(t, err)
	var q workflows.BackfillProgress
	require.NoError(t, v.Get(&q))
	assert.Equal(t, 10, q.FilesTotal)
	assert.Equal(t, int64(1000), q.RowsDone)
	assert.Empty(t, q.Running)
}

func TestBackfillRefusesSchemaMismatch(t *testing.T) {
	env := quietSuite().NewTestWorkflowEnvironment()
	a := &activities.Backfills{}
	env.RegisterActivity(a)
	calls := 0
	env.OnActivity(a.ListArchive, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ListArchiveInput) (activities.ListArchiveResult, error) {
			calls++
			return activities.ListArchiveResult{}, temporal.NewNonRetryableApplicationError(
				"archive file:///a: iot/0/x.parquet: schema fingerprint 77aa does not match expected 9f1c", activities.ErrTypeSchemaMismatch, nil)
		})
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "77aa")
	assert.Contains(t, err.Error(), "9f1c")
	assert.Equal(t, 1, calls, "a schema mismatch is not retried")
}

func TestBackfillRetriesReplayFromHeartbeat(t *testing.T) {
	env, a := newBackfillEnv(t, 1)
	attempts := 0
	env.OnActivity(a.ReplayFile, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ReplayFileInput) (activities.ReplayFileResult, error) {
			attempts++
			if attempts == 1 {
				return activities.ReplayFileResult{}, fmt.Errorf("worker crashed")
			}
			return activities.ReplayFileResult{File: in.File, Rows: 40, Written: 40, ResumedAt: 60}, nil
		})
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	require.NoError(t, env.GetWorkflowError())
	var p workflows.BackfillProgress
	require.NoError(t, env.GetWorkflowResult(&p))
	assert.Equal(t, 2, attempts)
	assert.Equal(t, 1, p.FilesDone)
}

func TestBackfillCancel(t *testing.T) {
	env, a := newBackfillEnv(t, 6)
	var started atomic.Int32
	env.OnActivity(a.ReplayFile, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ReplayFileInput) (activities.ReplayFileResult, error) {
			started.Add(1)
			<-ctx.Done()
			return activities.ReplayFileResult{}, ctx.Err()
		})
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Millisecond)
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.True(t, temporal.IsCanceledError(err), "got %v", err)
	assert.LessOrEqual(t, started.Load(), int32(3), "only the first window started; cancelled replays are not replaced")
	var ce *temporal.CanceledError
	require.ErrorAs(t, err, &ce)
	var p workflows.BackfillProgress
	require.NoError(t, ce.Details(&p), "the cancellation carries the progress so far")
	assert.Equal(t, 6, p.FilesTotal)
	assert.False(t, p.Done)
}

func TestBackfillValidates(t *testing.T) {
	env := quietSuite().NewTestWorkflowEnvironment()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	env.ExecuteWorkflow(workflows.BackfillWorkflow, workflows.BackfillInput{Location: "file:///a", Sink: "s", From: now, To: now})
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is empty")
}
