package workflows_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workflows"
)

// Temporal's payload limits: it warns from 512 KB and refuses a payload
// over 2 MB (its defaults, limit.blobSize.warn and .error).
const (
	blobWarn  = 512 * 1024
	blobLimit = 2 * 1024 * 1024
)

// sizeWorker is the id of the k-th worker of realisticTable: a host name
// as Kubernetes gives a pod of a deployment (the default worker id).
func sizeWorker(k int) string { return fmt.Sprintf("tflo-worker-7c9f6d5b8-%05d", k) }

// sizeEpoch is the epoch of the k-th worker's shards (a consumer group's
// generation when it gained them).
func sizeEpoch(k int) streaming.Epoch { return streaming.Epoch(1040 + 3*k) }

// realisticTable is the coordinator's state over n Kafka partitions on
// workers, as a long-running pipeline has it: every shard moved once
// (a rebalance), was checkpointed by round 123,456 with a cursor as the
// worker reports it, and one in a hundred failed its last round.
func realisticTable(n, workers int) workflows.CoordinatorState {
	st := workflows.CoordinatorState{Pipeline: "iot", Round: 123_456, Breaker: workflows.BreakerClosed, SearchBreaker: workflows.BreakerClosed}
	at := time.Date(2026, 12, 7, 21, 39, 44, 123_456_789, time.UTC)
	for k := range workers {
		st.Workers = append(st.Workers, workflows.WorkerRow{WorkerID: sizeWorker(k), TaskQueue: workflows.WorkerTaskQueue(sizeWorker(k)),
			Status: workflows.WorkerLive, Shards: n / workers, LastRound: st.Round, Instance: fmt.Sprintf("%s-%d", sizeWorker(k), 1765143584)})
	}
	for i := range n {
		k := i % workers
		shard := streaming.KafkaShard("sensor-readings", int32(i))
		owner := workflows.Owner{WorkerID: sizeWorker(k), TaskQueue: workflows.WorkerTaskQueue(sizeWorker(k)), Epoch: sizeEpoch(k)}
		row := workflows.ShardRow{Shard: shard, Owner: owner, Status: workflows.ShardOK, Round: st.Round, CheckpointID: 98_765 + uint64(i%7),
			Cursor:   streaming.KafkaOffset{Topic: "sensor-readings", Partition: int32(i), Offset: 987_654_321 + int64(i)}.String(),
			Bytes:    48_213 + int64(i%1000),
			Duration: activities.Duration(3*time.Millisecond + time.Duration(i%1000)*time.Microsecond), At: at, Local: int64(i % 3),
			Handoff: fmt.Sprintf("%s@%d → %s@%d: done in 1.234s, final checkpoint %d", sizeWorker((k+1)%workers), sizeEpoch(k)-1, sizeWorker(k), sizeEpoch(k), 98_700+i%7),
		}
		if i%100 == 0 {
			row.Status, row.Round = workflows.ShardFailed, st.Round-1
			row.Error = fmt.Sprintf("commit checkpoint %d of shard %s: put s3://tflo-state/iot/%s/checkpoints/%d: RequestTimeout", row.CheckpointID, shard, shard, row.CheckpointID)
		}
		st.Shards = append(st.Shards, row)
	}
	// The table is sorted by shard, as the coordinator keeps it.
	slices.SortFunc(st.Shards, func(a, b workflows.ShardRow) int { return strings.Compare(string(a.Shard), string(b.Shard)) })
	return st
}

// encodedBytes is the size of v as the SDK's default data converter
// encodes it.
func encodedBytes(t *testing.T, v any) int {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayloads(v)
	require.NoError(t, err)
	return payloadsBytes(p)
}

func payloadsBytes(p *commonpb.Payloads) int {
	n := 0
	for _, pl := range p.GetPayloads() {
		n += len(pl.GetData())
	}
	return n
}

// TestCoordinatorContinuesAsNewWith20000Shards: the coordinator's
// continue-as-new input carried its whole per-shard table, about 440
// bytes a shard as the SDK's default data converter encodes it, past
// Temporal's 2 MB payload limit from some 4,700 shards: the workflow
// task that continued as new failed, and the coordinator with it. It
// carries each shard's owner, epoch, status, last round and checkpoint id
// folded by owner (a few dozen bytes a shard), and the next run's round
// asks every owner for its shards at their epochs.
func TestCoordinatorContinuesAsNewWith20000Shards(t *testing.T) {
	const n, workers = 20_000, 16
	// The input is the table of a run of the current build, whole rows.
	st := realisticTable(n, workers)
	full := encodedBytes(t, workflows.CoordinatorInput{Pipeline: "iot", State: &st})

	env, f := newCoordinatorEnv(t)
	// Whole rows of 20,000 shards are 9 MB, an input only a test can
	// start with: decoding it under the race detector takes longer than
	// the deadlock detector's second. The next run, on what this one
	// carries, keeps the default.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	// Every worker answers as a Kafka shard's host does; one shard in a
	// hundred fails on storage.
	f.outcome = func(in activities.RoundInput) (activities.RoundResult, error, bool) {
		res := activities.RoundResult{Round: in.Round, WorkerID: in.WorkerID, Duration: activities.Duration(40 * time.Millisecond)}
		for _, se := range in.Shards {
			_, p, err := se.Shard.KafkaPartition()
			require.NoError(t, err)
			sr := activities.ShardResult{Shard: se.Shard, Epoch: se.Epoch, Status: activities.ShardOK, CheckpointID: 98_800 + uint64(p%7),
				Cursor: streaming.KafkaOffset{Topic: "sensor-readings", Partition: p, Offset: 987_700_000 + int64(p)}.String(),
				Bytes:  48_000 + int64(p%1000), Duration: activities.Duration(3 * time.Millisecond)}
			if p%100 == 0 {
				sr.Status, sr.Error = activities.ShardFailed, fmt.Sprintf("commit checkpoint %d of shard %s: RequestTimeout", sr.CheckpointID, se.Shard)
			}
			res.Shards = append(res.Shards, sr)
		}
		return res, nil, true
	}
	in := workflows.CoordinatorInput{Pipeline: "iot", Interval: activities.Duration(10 * time.Second), ContinueAsNewAfter: 1, State: &st}
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	logPanic(t, env.GetWorkflowError())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	carried := payloadsBytes(can.Input)
	for _, m := range []struct {
		what  string
		bytes int
	}{{"whole rows", full}, {"carried", carried}} {
		per := float64(m.bytes) / n
		t.Logf("%s: %d bytes for %d shards, %.1f bytes a shard; 512 KB at %d shards, 2 MB at %d", m.what, m.bytes, n, per, int(blobWarn/per), int(blobLimit/per))
	}
	require.Less(t, carried, blobLimit, "the continue-as-new input of %d shards is over Temporal's payload limit", n)
	// A guard with room: a shard's name and checkpoint id are 31 bytes.
	assert.LessOrEqual(t, float64(carried)/n, 48.0, "bytes a shard in the continue-as-new input")

	var next workflows.CoordinatorInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	assert.Equal(t, uint64(123_457), next.State.Round)
	next.ContinueAsNewAfter = 0 // the default: no continue-as-new in the next run's round

	// The next run's round asks every worker for its shards at their
	// epochs.
	env2, f2 := newCoordinatorEnv(t)
	var table []workflows.ShardRow
	env2.RegisterDelayedCallback(func() { queryInto(t, env2, workflows.QueryShards, &table) }, 5*time.Second)
	stopCoordinatorAfter(env2, 15*time.Second)
	env2.ExecuteWorkflow(workflows.CoordinatorWorkflow, next)
	require.True(t, env2.IsWorkflowCompleted())
	logPanic(t, env2.GetWorkflowError())
	require.NoError(t, env2.GetWorkflowError())
	calls := f2.roundCalls()
	require.Len(t, calls, workers, "one share per worker")
	asked := 0
	for _, c := range calls {
		assert.Equal(t, uint64(123_458), c.in.Round)
		k := slices.IndexFunc(st.Workers, func(w workflows.WorkerRow) bool { return w.WorkerID == c.in.WorkerID })
		require.GreaterOrEqual(t, k, 0, "round asked unknown worker %q", c.in.WorkerID)
		assert.Equal(t, workflows.WorkerTaskQueue(c.in.WorkerID), c.queue)
		for _, se := range c.in.Shards {
			_, p, err := se.Shard.KafkaPartition()
			require.NoError(t, err)
			require.Equal(t, k, int(p)%workers, "shard %s asked of worker %s", se.Shard, c.in.WorkerID)
			require.Equal(t, sizeEpoch(k), se.Epoch, "epoch of shard %s", se.Shard)
		}
		asked += len(c.in.Shards)
	}
	assert.Equal(t, n, asked, "every shard is in the next run's round")
	// Its result at stop is bounded the same way.
	var final workflows.CoordinatorState
	require.NoError(t, env2.GetWorkflowResult(&final))
	assert.Less(t, encodedBytes(t, final), blobLimit, "the result at stop of %d shards is over Temporal's payload limit", n)
	assert.Len(t, final.Table(), n)

	// Before that round the table has every shard's owner, status, last
	// round and checkpoint id.
	require.Len(t, table, n)
	for _, row := range table {
		_, p, err := row.Shard.KafkaPartition()
		require.NoError(t, err)
		k := int(p) % workers
		require.Equal(t, workflows.Owner{WorkerID: sizeWorker(k), TaskQueue: workflows.WorkerTaskQueue(sizeWorker(k)), Epoch: sizeEpoch(k)}, row.Owner, row.Shard)
		if p%100 == 0 {
			require.Equal(t, workflows.ShardFailed, row.Status, row.Shard)
			require.Equal(t, uint64(123_455), row.Round, "the failed shard's last checkpointed round, %s", row.Shard)
		} else {
			require.Equal(t, workflows.ShardOK, row.Status, row.Shard)
			require.Equal(t, uint64(123_457), row.Round, row.Shard)
		}
		require.Equal(t, 98_800+uint64(p%7), row.CheckpointID, row.Shard)
	}
}

// queryPages reads the coordinator's per-shard table a page of limit
// rows at a time (QueryShardsPage), failing t on a page without rows that
// says more remain.
func queryPages(t *testing.T, env *testsuite.TestWorkflowEnvironment, limit int) (rows []workflows.ShardRow, pages []workflows.ShardsPage) {
	t.Helper()
	var after streaming.ShardID
	for {
		var page workflows.ShardsPage
		queryInto(t, env, workflows.QueryShardsPage, &page, workflows.ShardsPageRequest{After: after, Limit: limit})
		pages = append(pages, page)
		rows = append(rows, page.Rows...)
		if !page.More {
			return rows, pages
		}
		require.NotEmpty(t, page.Rows, "page %d after %q says more remain but has no row", len(pages), after)
		after = page.Rows[len(page.Rows)-1].Shard
	}
}

// TestCoordinatorTableInPagesOf20000Shards: QueryShards answers the whole
// table, about 450 bytes a shard: Temporal refuses an answer over 2 MB
// (QueryFailed "Blob data size exceeds limit." from some 4,700 shards;
// past 4 MB the gRPC message is refused too). QueryShardsPage answers it
// in pages of at most MaxShardsPage rows, each under Temporal's 512 KB
// warning, and paging gives every row once, in shard order.
func TestCoordinatorTableInPagesOf20000Shards(t *testing.T) {
	const n = 20_000
	st := realisticTable(n, 16)
	env, _ := newCoordinatorEnv(t)
	// Whole rows of 20,000 shards: see TestCoordinatorContinuesAsNewWith20000Shards.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	var rows, small []workflows.ShardRow
	var pages []workflows.ShardsPage
	env.RegisterDelayedCallback(func() {
		rows, pages = queryPages(t, env, 0)
		small, _ = queryPages(t, env, 7)
		// A page after the last shard is empty and the end.
		var end workflows.ShardsPage
		queryInto(t, env, workflows.QueryShardsPage, &end, workflows.ShardsPageRequest{After: st.Shards[n-1].Shard})
		assert.Empty(t, end.Rows)
		assert.False(t, end.More)
	}, time.Second)
	stopCoordinatorAfter(env, time.Minute)
	// Manual: no round changes the table while it is read.
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, workflows.CoordinatorInput{Pipeline: "iot", Manual: true, State: &st})
	coordinatorResult(t, env)

	require.Len(t, pages, n/workflows.MaxShardsPage, "pages of the default size")
	for i, p := range pages {
		require.Len(t, p.Rows, workflows.MaxShardsPage, "rows of page %d", i)
		require.Less(t, encodedBytes(t, p), blobWarn, "page %d is over Temporal's payload warning", i)
	}
	require.Equal(t, st.Shards, rows, "every row once, in shard order")
	require.Equal(t, st.Shards, small, "every row once, in shard order, 7 at a time")
}

// TestCoordinatorTablePageOfLongErrorsStaysUnderTheLimit: rows with long
// errors end a page before its rows pass 1 MB, so it stays under the
// 2 MB limit on a query's answer whatever the rows hold.
func TestCoordinatorTablePageOfLongErrorsStaysUnderTheLimit(t *testing.T) {
	const n = 40
	st := realisticTable(n, 4)
	for i := range st.Shards {
		st.Shards[i].Error = strings.Repeat("e", 100_000)
	}
	env, _ := newCoordinatorEnv(t)
	var rows []workflows.ShardRow
	var pages []workflows.ShardsPage
	env.RegisterDelayedCallback(func() { rows, pages = queryPages(t, env, 0) }, time.Second)
	stopCoordinatorAfter(env, time.Minute)
	env.ExecuteWorkflow(workflows.CoordinatorWorkflow, workflows.CoordinatorInput{Pipeline: "iot", Manual: true, State: &st})
	coordinatorResult(t, env)

	require.Greater(t, len(pages), 1, "4 MB of rows take more than one page")
	for i, p := range pages {
		require.LessOrEqual(t, encodedBytes(t, p), 1<<20+4096, "page %d of %d rows", i, len(p.Rows))
	}
	require.Equal(t, st.Shards, rows, "every row once, in shard order")
}
