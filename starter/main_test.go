package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

type result struct {
	code     int
	out, err string
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := newRootCommand(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return result{exitCode(err), out.String(), errOut.String()}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	cases := [][]string{
		{"pipeline", "start", "--topic", "readings"},
		{"pipeline", "start"},
		{"backfill", "start", "--archive", "file:///a"},
		{"backfill", "start", "--name", "x", "--archive", "file:///a", "--from", "yesterday"},
		{"pipeline", "status", "--no-such-flag"},
		{"checkpoint", "list", "--address", "no-port"},
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := run(t, args...)
			assert.Equal(t, exitUsage, r.code, "stderr: %s", r.err)
			assert.NotEmpty(t, r.err)
		})
	}
}

func TestProgressLine(t *testing.T) {
	line := progressLine(workflows.BackfillProgress{FilesDone: 1, FilesTotal: 4, RowsDone: 250, RowsTotal: 1000, RowsPerSecond: 50, ETA: 15 * time.Second})
	assert.Equal(t, "[#######-----------------------]  25%  files 1/4  rows 250/1000  50 rows/s  ETA 15s", line)
	assert.Contains(t, progressLine(workflows.BackfillProgress{Done: true}), "100%")
}

// TestCommandsAgainstDevServer drives every command against a real
// Temporal dev server whose workers run the real workflows over stand-in
// activities.
func TestCommandsAgainstDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	var stages fakeactivities.Stages
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.CheckpointWorkflow)
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	ctl.RegisterWorkflow(workflows.LeaseWorkflow)
	ctl.RegisterWorkflow(workflows.HandoffWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	for _, q := range []string{workflows.WorkerTaskQueue("w1"), workflows.WorkerTaskQueue(fakeactivities.DeadWorker), workflows.BackfillTaskQueue} {
		w := worker.New(srv.Client, q, worker.Options{})
		stages.Register(w)
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
	addr := "--address=" + srv.HostPort

	r := run(t, "pipeline", "start", addr, "--pipeline", "cli", "--topic", "readings", "--partitions", "2", "--interval", "1h")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, workflows.CheckpointWorkflowID("cli", "readings/1"))
	// Starting again keeps the running workflows (idempotent).
	r = run(t, "pipeline", "start", addr, "--pipeline", "cli", "--shard", "readings/0")
	require.Equal(t, exitOK, r.code, r.err)

	// An owner announces itself for readings-0, as a worker would.
	require.NoError(t, srv.Client.SignalWorkflow(context.Background(), workflows.CheckpointWorkflowID("cli", "readings/0"), "",
		workflows.SignalOwner, workflows.Owner{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Epoch: 1}))

	r = run(t, "checkpoint", "now", addr, "--pipeline", "cli", "--shard", "readings/0", "--wait", "30s", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var now struct {
		States []workflows.CheckpointState `json:"states"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &now))
	require.Len(t, now.States, 1)
	assert.GreaterOrEqual(t, now.States[0].Completed, int64(1))
	assert.Equal(t, "w1", now.States[0].Owner.WorkerID)

	// Visibility is eventually consistent: wait for both shards to be listed
	// with their search attributes.
	var listed []workflowExecution
	require.Eventually(t, func() bool {
		r = run(t, "checkpoint", "list", addr, "--pipeline", "cli", "--json")
		listed = nil
		if r.code != exitOK || json.Unmarshal([]byte(r.out), &listed) != nil || len(listed) != 2 {
			return false
		}
		for _, l := range listed {
			if l.Shard == "readings/0" && !l.LastCheckpoint.IsZero() {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "checkpoint list: %s %s", r.out, r.err)
	for _, l := range listed {
		assert.Equal(t, "cli", l.Pipeline)
		assert.Equal(t, workflows.BreakerClosed, l.Breaker)
	}

	r = run(t, "pipeline", "status", addr, "--pipeline", "cli")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "SHARD")
	assert.Contains(t, r.out, "readings/0")
	assert.Contains(t, r.out, "w1")

	r = run(t, "pipeline", "stop", addr, "--pipeline", "cli")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "asked 2 checkpoint workflows")

	r = run(t, "pipeline", "status", addr, "--pipeline", "nobody")
	assert.Equal(t, exitNotFound, r.code, r.err)

	r = run(t, "backfill", "start", addr, "--name", "cli-bf", "--archive", "file:///archive", "--window", "2", "--wait")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "100%")
	assert.Contains(t, r.out, "files 3/3")
	assert.Equal(t, int64(3), stages.Replayed.Load())

	r = run(t, "backfill", "status", addr, "--name", "cli-bf", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, `"Completed"`)

	// Workers: one alive, heartbeating the shard it holds; one that dies.
	r = run(t, "workers", addr)
	require.Equal(t, exitNotFound, r.code, "no lease workflow runs yet: %s %s", r.out, r.err)
	held := []activities.HeldShard{{Pipeline: "cli", Shard: "readings/0", Epoch: 1, WorkerID: "w-alive", TaskQueue: workflows.WorkerTaskQueue("w-alive")}}
	alive := worker.New(srv.Client, workflows.WorkerTaskQueue("w-alive"), worker.Options{})
	alive.RegisterActivityWithOptions(func(ctx context.Context, in activities.LeaseInput) error {
		for {
			activity.RecordHeartbeat(ctx, held)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(in.Interval):
			}
		}
	}, activity.RegisterOptions{Name: "KeepLeases"})
	require.NoError(t, alive.Start())
	t.Cleanup(alive.Stop)
	ctx := context.Background()
	for _, id := range []string{"w-alive", fakeactivities.DeadWorker} {
		_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.LeaseWorkflowID(id), TaskQueue: workflows.ControlTaskQueue},
			workflows.LeaseWorkflow, workflows.LeaseInput{WorkerID: id, TaskQueue: workflows.WorkerTaskQueue(id), HeartbeatTimeout: 3 * time.Second})
		require.NoError(t, err)
	}
	var leases []workerLease
	if !assert.Eventually(t, func() bool {
		r = run(t, "workers", addr, "--all", "--json")
		leases = nil
		if r.code != exitOK || json.Unmarshal([]byte(r.out), &leases) != nil {
			return false
		}
		var sawAlive, sawDead bool
		for _, l := range leases {
			sawAlive = sawAlive || l.WorkerID == "w-alive" && l.Status == workflows.LeaseAlive && len(l.Shards) == 1 && !l.LastHeartbeat.IsZero()
			sawDead = sawDead || l.WorkerID == fakeactivities.DeadWorker && l.Status == workflows.LeaseDead && len(l.Handoffs) == 1
		}
		return sawAlive && sawDead
	}, time.Minute, 200*time.Millisecond, "workers --all never showed w-alive alive and the dead worker dead") {
		t.Fatalf("last workers --all: %s %s", r.out, r.err)
	}
	r = run(t, "workers", addr)
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "WORKER")
	assert.Contains(t, r.out, "w-alive")
	t.Logf("starter workers:\n%s", r.out)
	assert.Contains(t, r.out, "cli/readings/0@1")
	assert.NotContains(t, r.out, fakeactivities.DeadWorker+" ", "an ended lease is listed only with --all")

	r = run(t, "backfill", "status", addr, "--name", "missing")
	assert.Equal(t, exitNotFound, r.code, r.err)
	r = run(t, "backfill", "cancel", addr, "--name", "missing")
	assert.Equal(t, exitNotFound, r.code, r.err)
}

// TestOperatorsListsTheRegistry: `starter operators` lists every type of
// the default registry with its parameters; --json is the same as data;
// an unknown type exits 3.
func TestOperatorsListsTheRegistry(t *testing.T) {
	r := run(t, "operators")
	require.Equal(t, exitOK, r.code, r.err)
	for _, s := range []string{"sma — ", "vwap — ", "episode — ", "window", "warmup", "full|partial", "modes:   below (-1), inside (0), above (1)"} {
		require.Contains(t, r.out, s)
	}

	r = run(t, "operators", "--json", "bollinger", "sma")
	require.Equal(t, exitOK, r.code, r.err)
	var types []struct {
		Name   string `json:"name"`
		Params []struct {
			Name    string `json:"name"`
			Kind    string `json:"kind"`
			Default any    `json:"default"`
		} `json:"params"`
		Modes map[string]string `json:"modes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &types), r.out)
	require.Len(t, types, 2)
	require.Equal(t, "bollinger", types[0].Name)
	require.Equal(t, "above", types[0].Modes["1"])
	require.Equal(t, "sma", types[1].Name)
	require.Equal(t, "window", types[1].Params[0].Name)
	require.Equal(t, "int", types[1].Params[0].Kind)

	r = run(t, "operators", "smaa")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.err, `no operator type "smaa"`)
}
