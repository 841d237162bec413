package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// TestPipelineStatusOf20000Shards: pipeline status asked the coordinator
// for its whole per-shard table in one answer (QueryShards), which
// Temporal refuses past 2 MB ("Blob data size exceeds limit.", from some
// 4,600 shards of rows as a long-running pipeline has them) and, past 4
// MB, as a gRPC message ("received message after decompression larger
// than max 4194304"): status failed. It reads the table a page at a time
// (QueryShardsPage): 20,000 shards here, some 5 MB as whole rows.
func TestPipelineStatusOf20000Shards(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	startStageWorkers(t, srv, nil)
	const n, owners = 20_000, 16
	// The table as continue-as-new carries it: folded by owner (about 35
	// bytes a shard, a start input under 2 MB).
	st := workflows.CoordinatorState{Pipeline: "big", Round: 41, Breaker: workflows.BreakerClosed, SearchBreaker: workflows.BreakerClosed}
	at := time.Date(2026, 12, 7, 21, 39, 44, 0, time.UTC)
	var want []streaming.ShardID
	for k := range owners {
		id := fmt.Sprintf("tflo-worker-7c9f6d5b8-%05d", k)
		g := workflows.ShardGroup{Owner: workflows.Owner{WorkerID: id, TaskQueue: workflows.WorkerTaskQueue(id), Epoch: streaming.Epoch(1040 + k)},
			Status: workflows.ShardOK, Round: 41, At: at}
		for p := k; p < n; p += owners {
			g.Shards = append(g.Shards, streaming.KafkaShard("sensor-readings", int32(p)))
		}
		g.Shards = sortedShards(g.Shards)
		for _, shard := range g.Shards {
			_, p, err := shard.KafkaPartition()
			require.NoError(t, err)
			g.CheckpointIDs = append(g.CheckpointIDs, uint64(98_000+p))
		}
		want = append(want, g.Shards...)
		st.Groups = append(st.Groups, g)
	}
	want = sortedShards(want)
	ctx := context.Background()
	_, err := srv.Client.ExecuteWorkflow(ctx, workflows.CoordinatorStartOptions(workflows.CoordinatorInput{Pipeline: "big"}), workflows.CoordinatorWorkflow,
		workflows.CoordinatorInput{Pipeline: "big", Manual: true, State: &st})
	require.NoError(t, err)

	addr := "--address=" + srv.HostPort
	r := run(t, "pipeline", "status", addr, "--pipeline", "big", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var rows []workflows.ShardRow
	require.NoError(t, json.Unmarshal([]byte(r.out), &rows))
	require.Len(t, rows, n)
	p, err := converter.GetDefaultDataConverter().ToPayloads(rows)
	require.NoError(t, err)
	whole := len(p.GetPayloads()[0].GetData())
	t.Logf("the whole table of %d shards is %d bytes", n, whole)
	require.Greater(t, whole, 4<<20, "the whole table crosses gRPC's 4 MB")
	for i, row := range rows {
		require.Equal(t, want[i], row.Shard, "row %d: every shard once, in order", i)
		_, part, err := row.Shard.KafkaPartition()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("tflo-worker-7c9f6d5b8-%05d", int(part)%owners), row.Owner.WorkerID, row.Shard)
		require.Equal(t, uint64(98_000)+uint64(part), row.CheckpointID, row.Shard)
	}

	r = run(t, "pipeline", "status", addr, "--pipeline", "big")
	require.Equal(t, exitOK, r.code, r.err)
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	require.Len(t, lines, n+1, "a header and a line a shard")
	assert.Regexp(t, `^`+regexp.QuoteMeta(string(want[0]))+`\s+tflo-worker-7c9f6d5b8-00000\s+1040\s+ok\s+41\s+98000\s`, lines[1])
}

// TestPipelineStatusOfAnEarlierCoordinator: a coordinator of an earlier
// build knows no QueryShardsPage (its answer is QueryFailed "unknown
// queryType"); pipeline status asks it for the whole table
// (QueryShards), as earlier starters did.
func TestPipelineStatusOfAnEarlierCoordinator(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	table := []workflows.ShardRow{
		{Shard: "old/0", Owner: workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 3}, Status: workflows.ShardOK, Round: 7, CheckpointID: 70},
		{Shard: "old/1", Owner: workflows.Owner{WorkerID: "w2", TaskQueue: workflows.WorkerTaskQueue("w2"), Epoch: 4}, Status: workflows.ShardFailed, Round: 6, CheckpointID: 61, Error: "put: RequestTimeout"},
	}
	w := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ workflows.CoordinatorInput) error {
		if err := workflow.SetQueryHandler(ctx, workflows.QueryShards, func() ([]workflows.ShardRow, error) { return table, nil }); err != nil {
			return err
		}
		return workflow.Await(ctx, func() bool { return false })
	}, workflow.RegisterOptions{Name: "CoordinatorWorkflow"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	_, err := srv.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: workflows.CoordinatorWorkflowID("old"), TaskQueue: workflows.ControlTaskQueue},
		"CoordinatorWorkflow", workflows.CoordinatorInput{Pipeline: "old"})
	require.NoError(t, err)

	r := run(t, "pipeline", "status", "--address="+srv.HostPort, "--pipeline", "old", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var rows []workflows.ShardRow
	require.NoError(t, json.Unmarshal([]byte(r.out), &rows))
	assert.Equal(t, table, rows)
}

// sortedShards returns shards sorted, as the coordinator keeps them.
func sortedShards(shards []streaming.ShardID) []streaming.ShardID {
	out := append([]streaming.ShardID(nil), shards...)
	slices.Sort(out)
	return out
}
