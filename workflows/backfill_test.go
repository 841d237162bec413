package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/workflows"
)

// fakeArchive stands in for the backfill activities over an archive of
// partitions holding files of 100 rows and 1000 bytes each. A partition's
// position is the index of its next file, carried in Position.Row.
type fakeArchive struct {
	files map[string]int // files per partition
	names []string       // partitions in order
	page  int            // partitions per ListPartitions page

	mu         sync.Mutex
	running    map[string]bool
	maxRunning int
	calls      map[string]int // activities starting in the partition
	replayed   map[string]int // activities replaying part of the partition
	replays    int            // ReplayPartition activities run
	overlap    bool           // two replays of one partition ran at once
	starts     []int64
}

func newFakeArchive(parts, filesEach, page int) *fakeArchive {
	f := &fakeArchive{files: map[string]int{}, page: page, running: map[string]bool{}, calls: map[string]int{}, replayed: map[string]int{}}
	for i := range parts {
		p := fmt.Sprintf("iot/shard-%06d/", i)
		f.names = append(f.names, p)
		f.files[p] = filesEach + i%3
	}
	return f
}

func (f *fakeArchive) totals() activities.ArchiveTotals {
	t := activities.ArchiveTotals{Partitions: len(f.names)}
	for _, n := range f.files {
		t.Files += n
		t.Bytes += int64(n) * 1000
	}
	return t
}

func (f *fakeArchive) listPartitions(_ context.Context, in activities.ListPartitionsInput) (activities.ListPartitionsResult, error) {
	i := 0
	for i < len(f.names) && f.names[i] <= in.After {
		i++
	}
	end := min(i+f.page, len(f.names))
	return activities.ListPartitionsResult{Partitions: f.names[i:end], More: end < len(f.names)}, nil
}

func (f *fakeArchive) replay(_ context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
	f.mu.Lock()
	if f.running[in.Partition] {
		f.overlap = true
	}
	f.running[in.Partition] = true
	f.calls[in.Partition]++
	f.replays++
	f.starts = append(f.starts, in.Start.Row)
	n := 0
	for _, r := range f.running {
		if r {
			n++
		}
	}
	f.maxRunning = max(f.maxRunning, n)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.running[in.Partition] = false; f.mu.Unlock() }()
	// As ReplayPartition: the partition from Start, then those of Then
	// from theirs while fewer than MaxFiles files were read.
	parts := append([]string{in.Partition}, in.Then...)
	res := activities.ReplayPartitionResult{Partition: in.Partition, Next: in.Start}
	for ; res.Finished < len(parts); res.Finished++ {
		p := parts[res.Finished]
		if res.Finished > 0 && res.Files >= in.MaxFiles {
			return res, nil
		}
		f.mu.Lock()
		f.replayed[p]++
		f.mu.Unlock()
		from := int(res.Next.Row)
		to := min(from+in.MaxFiles-res.Files, f.files[p])
		k := to - from
		res.Files += k
		res.Bytes += int64(k) * 1000
		res.Rows += int64(k) * 100
		res.Written += int64(k) * 100
		if to < f.files[p] {
			res.Next = parquet.Position{File: p + strconv.Itoa(to), Row: int64(to), Seen: 1}
			return res, nil
		}
		res.Next = parquet.Position{}
	}
	res.Done = true
	return res, nil
}

// newListingEnv stubs the backfill's count with f's totals and its
// partition listing with list; the caller stubs the replays on a.
func newListingEnv(t *testing.T, f *fakeArchive, list func(context.Context, activities.ListPartitionsInput) (activities.ListPartitionsResult, error)) (*testsuite.TestWorkflowEnvironment, *activities.Backfills) {
	t.Helper()
	return newCountingEnv(t, func(context.Context, activities.CountArchiveInput) (activities.ArchiveTotals, error) {
		return f.totals(), nil
	}, list)
}

// newCountingEnv stubs the backfill's count with count and its partition
// listing with list; the caller stubs the replays on a.
func newCountingEnv(t *testing.T, count func(context.Context, activities.CountArchiveInput) (activities.ArchiveTotals, error),
	list func(context.Context, activities.ListPartitionsInput) (activities.ListPartitionsResult, error)) (*testsuite.TestWorkflowEnvironment, *activities.Backfills) {
	t.Helper()
	env := quietSuite().NewTestWorkflowEnvironment()
	a := &activities.Backfills{}
	env.RegisterActivity(a)
	env.RegisterWorkflow(workflows.BackfillWorkflow)
	env.OnActivity(a.CountArchive, mock.Anything, mock.Anything).Return(count)
	env.OnActivity(a.ListPartitions, mock.Anything, mock.Anything).Return(list)
	return env, a
}

// newPartitionEnv stubs the backfill activities with f; replay, when
// given, replaces f.replay.
func newPartitionEnv(t *testing.T, f *fakeArchive, replay ...func(context.Context, activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env, a := newListingEnv(t, f, f.listPartitions)
	fn := f.replay
	if len(replay) > 0 {
		fn = replay[0]
	}
	env.OnActivity(a.ReplayPartition, mock.Anything, mock.Anything).Return(fn)
	return env
}

// runToEnd runs the backfill in on env, which must complete it, and
// returns its progress.
func runToEnd(t *testing.T, env *testsuite.TestWorkflowEnvironment, in workflows.BackfillInput) workflows.BackfillProgress {
	t.Helper()
	env.ExecuteWorkflow(workflows.BackfillWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var p workflows.BackfillProgress
	require.NoError(t, env.GetWorkflowResult(&p))
	assert.True(t, p.Done)
	return p
}

// requireEveryFileOnce checks that p counts every file, byte and
// partition of f once, and that no partition replayed in two activities
// at once.
func requireEveryFileOnce(t *testing.T, f *fakeArchive, p workflows.BackfillProgress) {
	t.Helper()
	tot := f.totals()
	assert.Equal(t, tot.Files, p.FilesDone, "every file once")
	assert.Equal(t, tot.Bytes, p.BytesDone)
	assert.Equal(t, len(f.names), p.PartitionsDone)
	assert.False(t, f.overlap, "a partition's files replay in order, one activity at a time")
}

var backfillIn = workflows.BackfillInput{Name: "b1", Location: "file:///archive", Sink: "influx:replay/autogen", Window: 3, FilesPerActivity: 4}

func TestBackfillPartitionsInParallel(t *testing.T) {
	f := newFakeArchive(10, 9, 4)
	env := newPartitionEnv(t, f)
	p := runToEnd(t, env, backfillIn)
	tot := f.totals()
	requireEveryFileOnce(t, f, p)
	assert.Equal(t, tot.Files, p.FilesTotal)
	assert.Equal(t, int64(tot.Files)*100, p.RowsDone)
	assert.LessOrEqual(t, f.maxRunning, 3, "never more than Window partitions at once")
	for _, name := range f.names {
		want := (f.files[name] + 3) / 4
		assert.Equal(t, want, f.calls[name], "partition %s: one activity per 4 files", name)
	}
	v, err := env.QueryWorkflow(workflows.QueryStatus)
	require.NoError(t, err)
	var q workflows.BackfillProgress
	require.NoError(t, v.Get(&q))
	assert.Equal(t, tot.Files, q.FilesDone)
	assert.Empty(t, q.Running)
}

// TestBackfillBatchesSmallPartitions: an archive of many shards of a file
// or two replays in batches of partitions per activity, so its
// activities (and history events) grow with its files, not its shards;
// every file is still replayed once, in order, and the window is kept.
// Before, each partition took at least one activity: 120 one-to-three-file
// shards took 120.
func TestBackfillBatchesSmallPartitions(t *testing.T) {
	f := newFakeArchive(120, 1, 50) // 1 to 3 files each, pages of 50
	in := backfillIn
	in.Window, in.FilesPerActivity = 4, 16
	env := newPartitionEnv(t, f)
	p := runToEnd(t, env, in)
	tot := f.totals()
	requireEveryFileOnce(t, f, p)
	assert.LessOrEqual(t, f.maxRunning, 4)
	for _, name := range f.names {
		assert.GreaterOrEqual(t, f.replayed[name], 1, "partition %s replayed", name)
	}
	// 240 files at 16 per activity is 15 activities at best; the share
	// of each page among the window's lanes adds some.
	t.Logf("120 partitions, %d files: %d replay activities", tot.Files, f.replays)
	assert.Less(t, f.replays, 40, "small partitions replay in batches")
}

// TestBackfillStatusNamesEveryPartitionOfABatch: the status of a
// backfill replaying small partitions in batches names, as running, every
// partition of the batches in flight. Before, it named each batch's first
// partition only: a lane replaying shards 0 to 3 showed shard 0 running
// while its activity was in shard 3.
func TestBackfillStatusNamesEveryPartitionOfABatch(t *testing.T) {
	f := newFakeArchive(8, 1, 50) // 1 to 3 files each: two batches of 4
	in := backfillIn
	in.Window, in.FilesPerActivity = 2, 16
	var started atomic.Int32
	release := make(chan struct{})
	env := newPartitionEnv(t, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		started.Add(1)
		<-release
		return f.replay(ctx, in)
	})
	var running []string
	var check func()
	check = func() {
		if started.Load() < 2 {
			env.RegisterDelayedCallback(check, time.Millisecond)
			return
		}
		v, err := env.QueryWorkflow(workflows.QueryStatus)
		require.NoError(t, err)
		var p workflows.BackfillProgress
		require.NoError(t, v.Get(&p))
		running = p.Running
		close(release)
	}
	env.RegisterDelayedCallback(check, time.Millisecond)
	p := runToEnd(t, env, in)
	require.Equal(t, 2, f.replays, "the partitions replay in two batches")
	assert.Equal(t, f.names, running, "the partitions of both batches, in order")
	assert.Empty(t, p.Running)
	requireEveryFileOnce(t, f, p)
}

// TestBackfillBatchesOnAWorkerThatIgnoresThen: a replay activity of a
// build before batching (a worker not yet upgraded, or one of the user's
// own) ignores ReplayPartitionInput.Then and reports its own partition
// done, without Finished; the partitions of the batch after it are
// replayed by the lane's next activities. Before, its Done counted the
// whole batch done: those partitions were never replayed, and the
// backfill completed without them.
func TestBackfillBatchesOnAWorkerThatIgnoresThen(t *testing.T) {
	f := newFakeArchive(40, 1, 50) // 1 to 3 files each
	in := backfillIn
	in.Window, in.FilesPerActivity = 4, 16
	env := newPartitionEnv(t, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		in.Then = nil // the old input had no Then, nor the result Finished
		res, err := f.replay(ctx, in)
		res.Finished = 0
		return res, err
	})
	p := runToEnd(t, env, in)
	for _, name := range f.names {
		assert.Equal(t, 1, f.replayed[name], "partition %s replayed once", name)
	}
	requireEveryFileOnce(t, f, p)
}

// newProbeArchive returns the archive of the probe that found lanes never
// rebalanced, 30 one-file shards and 10 of 20 files (every fourth), and
// a backfill of it in a window of 4 at 40 files per activity: batches
// stop at 40 files in big partitions with partitions after them.
func newProbeArchive() (*fakeArchive, workflows.BackfillInput) {
	f := newFakeArchive(40, 1, 50)
	for i, p := range f.names {
		f.files[p] = 1
		if i%4 == 0 {
			f.files[p] = 20
		}
	}
	in := backfillIn
	in.Window, in.FilesPerActivity = 4, 40
	return f, in
}

// TestBackfillRequeuesWhatALaneDidNotStart: the probe's archive (see
// newProbeArchive). A batch's activity that stops at 40 files in a
// big partition leaves the partitions after it to the queue: another
// lane replays them while the big one's next activity runs (each such
// activity waits for that here, up to a deadline). Before, the lane kept
// them queued behind the big partition for its own next activity, and
// the other lanes, their queue empty, sat idle.
func TestBackfillRequeuesWhatALaneDidNotStart(t *testing.T) {
	f, in := newProbeArchive()
	var mu sync.Mutex
	behind := map[string][]string{} // partition an activity stopped in: the batch's partitions after it
	var waitedOut atomic.Bool
	replayedAll := func(parts []string) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, p := range parts {
			if f.replayed[p] == 0 {
				return false
			}
		}
		return true
	}
	env := newPartitionEnv(t, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		mu.Lock()
		want := behind[in.Partition]
		mu.Unlock()
		if in.Start.Row > 0 && !waitedOut.Load() &&
			!assert.Eventually(t, func() bool { return replayedAll(want) }, 10*time.Second, time.Millisecond,
				"%v, queued behind %s where an activity stopped, are replayed by another lane while its next activity runs", want, in.Partition) {
			waitedOut.Store(true)
		}
		res, err := f.replay(ctx, in)
		if parts := append([]string{in.Partition}, in.Then...); !res.Done && res.Next.Row > 0 {
			mu.Lock()
			behind[parts[res.Finished]] = parts[res.Finished+1:]
			mu.Unlock()
		}
		return res, err
	})
	env.SetTestTimeout(time.Minute) // beyond the waits' deadline
	p := runToEnd(t, env, in)
	requireEveryFileOnce(t, f, p)
	mu.Lock()
	defer mu.Unlock()
	stoppedBefore := 0
	for _, parts := range behind {
		stoppedBefore += len(parts)
	}
	require.Positive(t, stoppedBefore, "an activity stops in a big partition with partitions of its batch after it")
	for i, name := range f.names {
		if i%4 != 0 {
			assert.Equal(t, 1, f.replayed[name], "one-file partition %s replayed once", name)
		}
	}
	t.Logf("230 files in 40 partitions: %d replay activities", f.replays)
}

// A long backfill continues as new, carrying the partitions in flight
// with their positions, the queue and the listing cursor; the chain of
// runs replays every file exactly once.
func TestBackfillContinuesAsNewCarryingLanes(t *testing.T) {
	f := newFakeArchive(7, 11, 3)
	in := backfillIn
	in.ActivitiesPerRun = 5
	runs := 0
	var p workflows.BackfillProgress
	for {
		runs++
		require.Less(t, runs, 50, "the chain does not end")
		env := newPartitionEnv(t, f)
		env.ExecuteWorkflow(workflows.BackfillWorkflow, in)
		require.True(t, env.IsWorkflowCompleted())
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
			var next workflows.BackfillInput
			require.NoError(t, converterArgs(can, &next))
			require.NotNil(t, next.Resume)
			assert.LessOrEqual(t, len(next.Resume.Lanes), in.Window)
			assert.Empty(t, next.Resume.Progress.Running, "in-flight replays finish before continuing as new")
			in = next
			continue
		}
		require.NoError(t, err)
		require.NoError(t, env.GetWorkflowResult(&p))
		break
	}
	tot := f.totals()
	assert.True(t, p.Done)
	assert.Greater(t, runs, 3)
	assert.Equal(t, runs, p.Runs)
	assert.Equal(t, tot.Files, p.FilesDone, "every file once")
	assert.Equal(t, 7, p.PartitionsDone)
	assert.False(t, f.overlap)
	// Each partition's activities resumed where the previous one stopped.
	for _, name := range f.names {
		assert.Equal(t, (f.files[name]+3)/4, f.calls[name], "partition %s", name)
	}
}

func converterArgs(can *workflow.ContinueAsNewError, out any) error {
	return converter.GetDefaultDataConverter().FromPayloads(can.Input, out)
}

func TestBackfillRefusesSchemaMismatch(t *testing.T) {
	env := quietSuite().NewTestWorkflowEnvironment()
	a := &activities.Backfills{}
	env.RegisterActivity(a)
	calls := 0
	env.OnActivity(a.CountArchive, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.CountArchiveInput) (activities.ArchiveTotals, error) {
			calls++
			return activities.ArchiveTotals{}, temporal.NewNonRetryableApplicationError(
				"archive file:///a: iot/0/x.parquet: schema fingerprint 77aa does not match expected 9f1c", activities.ErrTypeSchemaMismatch, nil)
		})
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "77aa")
	assert.Contains(t, err.Error(), "9f1c")
	assert.Equal(t, 1, calls, "a schema mismatch is not retried")
}

func TestBackfillRetriesReplay(t *testing.T) {
	f := newFakeArchive(2, 3, 10)
	var attempts atomic.Int32
	env := newPartitionEnv(t, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		if attempts.Add(1) == 1 {
			return activities.ReplayPartitionResult{}, errors.New("worker crashed")
		}
		return f.replay(ctx, in)
	})
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	require.NoError(t, env.GetWorkflowError())
	var p workflows.BackfillProgress
	require.NoError(t, env.GetWorkflowResult(&p))
	assert.Equal(t, f.totals().Files, p.FilesDone)
	assert.Greater(t, attempts.Load(), int32(len(f.names)))
}

func TestBackfillCancel(t *testing.T) {
	f := newFakeArchive(6, 3, 10)
	var started atomic.Int32
	env := newPartitionEnv(t, f, func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		started.Add(1)
		<-ctx.Done()
		return activities.ReplayPartitionResult{}, ctx.Err()
	})
	// Cancel once a replay has started (the archive counted): a cancel at
	// a fixed 1ms came, under load, while the count still ran.
	cancelWhen(env, func() bool { return started.Load() > 0 })
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
	assert.Equal(t, f.totals().Files, p.FilesTotal)
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

func TestBackfillProgressETAFromBytes(t *testing.T) {
	p := workflows.BackfillProgress{StartedAt: time.Unix(1000, 0), RowsDone: 5000, BytesDone: 250, BytesTotal: 1000}
	q := p.WithRate(time.Unix(1010, 0))
	assert.InDelta(t, 500, q.RowsPerSecond, 0.001)
	assert.Equal(t, 30*time.Second, q.ETA, "25 bytes/s, 750 bytes left")
}

// TestBackfillRefusalNamesTheBackfill: a backfill refused for a missing
// archive location or sink says which backfill, as its other refusals do.
// Before, both read "backfill: ... is required", naming none.
func TestBackfillRefusalNamesTheBackfill(t *testing.T) {
	for _, in := range []workflows.BackfillInput{
		{Name: "replay-march", Sink: "s"},
		{Name: "replay-march", Location: "file:///a"},
	} {
		err := in.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), `backfill "replay-march"`)
	}
}

// TestBackfillNegativeHeartbeatTimeoutIsRefused: a negative heartbeat
// timeout (the API takes one) was accepted, and every replay then failed
// on the SDK's "negative timeout"; the input is refused, naming it.
func TestBackfillNegativeHeartbeatTimeoutIsRefused(t *testing.T) {
	in := workflows.BackfillInput{Name: "replay-march", Location: "file:///a", Sink: "s", HeartbeatTimeout: -time.Second}
	err := in.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `backfill "replay-march": heartbeat timeout -1s must not be negative`)
	in.HeartbeatTimeout = 0
	require.NoError(t, in.Validate(), "0 is the default")
}

// TestBackfillListFailureWaitsForReplaysInFlight: a ListPartitions that
// fails while partitions replay ends the backfill after those replays
// finished, counting them. Before, the workflow returned at once: the
// replays in flight were abandoned, and the final status showed them
// still running, their files missing from the totals.
func TestBackfillListFailureWaitsForReplaysInFlight(t *testing.T) {
	f := newFakeArchive(3, 2, 1) // one partition per page
	listed := make(chan struct{})
	env, a := newListingEnv(t, f,
		func(ctx context.Context, in activities.ListPartitionsInput) (activities.ListPartitionsResult, error) {
			if in.After == "" {
				return f.listPartitions(ctx, in)
			}
			close(listed) // the first partition is replaying
			return activities.ListPartitionsResult{}, temporal.NewNonRetryableApplicationError("bucket gone", activities.ErrTypeBadInput, nil)
		})
	env.OnActivity(a.ReplayPartition, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
			<-listed
			return f.replay(ctx, in)
		})
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bucket gone")
	assert.Contains(t, err.Error(), "file:///archive", "the error names the archive")
	v, err := env.QueryWorkflow(workflows.QueryStatus)
	require.NoError(t, err)
	var p workflows.BackfillProgress
	require.NoError(t, v.Get(&p))
	assert.Empty(t, p.Running, "the replay in flight was waited for")
	assert.Equal(t, f.files[f.names[0]], p.FilesDone, "the replay in flight is counted")
	assert.Equal(t, 1, p.PartitionsDone)
}

// TestBackfillRidesOutAStoreOutageWhileListing: a listing that fails for
// minutes (an S3 outage) is retried until the store is back, as the
// replays are, and the backfill completes. Before, the count and the
// listing had 5 attempts, about 15 s of retries, and the outage failed
// the backfill.
func TestBackfillRidesOutAStoreOutageWhileListing(t *testing.T) {
	f := newFakeArchive(3, 2, 1) // one partition per page
	var failures atomic.Int32
	var outageEnd time.Time
	var env *testsuite.TestWorkflowEnvironment // the listing reads its clock
	env, a := newListingEnv(t, f,
		func(ctx context.Context, in activities.ListPartitionsInput) (activities.ListPartitionsResult, error) {
			if outageEnd.IsZero() {
				// Eight attempts (the test suite stops at 10).
				outageEnd = env.Now().Add(150 * time.Second)
			}
			if env.Now().Before(outageEnd) {
				failures.Add(1)
				return activities.ListPartitionsResult{}, errors.New("s3: 503 SlowDown")
			}
			return f.listPartitions(ctx, in)
		})
	env.OnActivity(a.ReplayPartition, mock.Anything, mock.Anything).Return(f.replay)
	p := runToEnd(t, env, backfillIn)
	assert.Equal(t, f.totals().Files, p.FilesDone)
	assert.Greater(t, failures.Load(), int32(5), "the outage outlasted 5 attempts")
}

// TestBackfillCountOfAHugeArchiveRunsPastAnHour: a count whose attempts
// each heartbeat progress and end (a worker restarting, an attempt's
// StartToClose), the next resuming from the heartbeat, runs as long as
// it progresses: here four attempts 30 minutes apart. Before, the count
// had a schedule-to-close of an hour, all attempts together, and the
// third retry, past the hour, was not made: the backfill failed while
// its count progressed.
func TestBackfillCountOfAHugeArchiveRunsPastAnHour(t *testing.T) {
	f := newFakeArchive(3, 2, 10)
	var env *testsuite.TestWorkflowEnvironment // the count reads its clock
	var start time.Time
	env, a := newCountingEnv(t, func(ctx context.Context, _ activities.CountArchiveInput) (activities.ArchiveTotals, error) {
		n := activity.GetInfo(ctx).Attempt
		if n == 1 {
			start = env.Now()
		}
		activity.RecordHeartbeat(ctx, n)
		if n < 4 {
			return activities.ArchiveTotals{}, temporal.NewApplicationErrorWithOptions("worker restarting", "Restart",
				temporal.ApplicationErrorOptions{NextRetryDelay: 30 * time.Minute})
		}
		return f.totals(), nil
	}, f.listPartitions)
	env.OnActivity(a.ReplayPartition, mock.Anything, mock.Anything).Return(f.replay)
	p := runToEnd(t, env, backfillIn)
	assert.Equal(t, f.totals().Files, p.FilesTotal)
	assert.Greater(t, env.Now().Sub(start), time.Hour, "the count ran past the hour")
}

// TestBackfillCancelDuringListingWaitsForReplays: a cancellation that
// comes while a page of partitions is listed waits for the replays in
// flight to stop, as one at any other time does. Before, the workflow
// returned at once, its progress showing them still running.
func TestBackfillCancelDuringListingWaitsForReplays(t *testing.T) {
	f := newFakeArchive(3, 2, 1) // one partition per page
	var listing, replaying atomic.Bool
	env, a := newListingEnv(t, f,
		func(ctx context.Context, in activities.ListPartitionsInput) (activities.ListPartitionsResult, error) {
			if in.After == "" {
				return f.listPartitions(ctx, in)
			}
			listing.Store(true)
			<-ctx.Done()
			return activities.ListPartitionsResult{}, ctx.Err()
		})
	env.OnActivity(a.ReplayPartition, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
			replaying.Store(true)
			<-ctx.Done()
			return activities.ReplayPartitionResult{}, ctx.Err()
		})
	cancelWhen(env, func() bool { return listing.Load() && replaying.Load() })
	env.ExecuteWorkflow(workflows.BackfillWorkflow, backfillIn)
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.True(t, temporal.IsCanceledError(err), "got %v", err)
	var ce *temporal.CanceledError
	require.ErrorAs(t, err, &ce)
	var p workflows.BackfillProgress
	require.NoError(t, ce.Details(&p))
	assert.Empty(t, p.Running, "the replay in flight was waited for")
}

// cancelWhen cancels env's workflow as soon as cond holds, checked every
// millisecond of the environment's clock (a cancel at a fixed time came,
// under load, before what the test waits for).
func cancelWhen(env *testsuite.TestWorkflowEnvironment, cond func() bool) {
	var check func()
	check = func() {
		if cond() {
			env.CancelWorkflow()
			return
		}
		env.RegisterDelayedCallback(check, time.Millisecond)
	}
	env.RegisterDelayedCallback(check, time.Millisecond)
}
