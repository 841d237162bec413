package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

type result struct {
	code     int
	out, err string
}

// run runs the CLI in process through execute, the path main takes, so
// stderr holds what a user sees (use the built binary, binary_test.go, for
// what only a process shows).
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runWith(t, nil, args...)
}

// runWith is run with the client c, when not nil, in place of the one the
// command would dial (c's Close is called when the command has run).
func runWith(t *testing.T, c client.Client, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, a := newRoot(&out, &errOut)
	a.client = c
	code := executeRoot(ctx, root, a, args)
	return result{code, out.String(), errOut.String()}
}

// TestUsageErrorsNameTheFlag: bad input is a usage error (exit 2) whose
// message names the flag as typed, not a field of the workflow input.
func TestUsageErrorsNameTheFlag(t *testing.T) {
	isolateTemporalConfig(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"pipeline", "start", "--interval", "-1s"}, "Error: --interval -1s must not be negative"},
		{[]string{"pipeline", "start", "--breaker-threshold", "-2"}, "Error: --breaker-threshold -2 must not be negative"},
		{[]string{"pipeline", "start", "--max-checkpoint-age", "-3s"}, "Error: --max-checkpoint-age -3s must not be negative"},
		// A zero used to become the coordinator's default silently.
		{[]string{"pipeline", "start", "--interval", "0"}, "Error: --interval 0s must be positive (its default is 10s)"},
		{[]string{"pipeline", "start", "--breaker-threshold", "0"}, "Error: --breaker-threshold 0 must be positive (its default is 3)"},
		{[]string{"pipeline", "start", "--breaker-cool-down", "0s"}, "Error: --breaker-cool-down 0s must be positive (its default is 1m0s)"},
		{[]string{"pipeline", "start", "--pipeline", ""}, "Error: checkpoint coordinator: pipeline is empty"},
		{[]string{"backfill", "start", "--name", "x"}, "Error: --archive is required: file:///var/tflo/archive or s3://bucket/prefix"},
		{[]string{"backfill", "start", "--name", "x", "--archive", "file:///a", "--window", "-1"}, "Error: --window -1 must be at least 1"},
		{[]string{"backfill", "start", "--name", "x", "--archive", "file:///a", "--files-per-activity", "-1"}, "Error: --files-per-activity -1 must be at least 1"},
		{[]string{"backfill", "start", "--name", "x", "--archive", "file:///a", "--from", "yesterday"}, `Error: --from "yesterday": want RFC 3339, like 2026-06-01T00:00:00Z`},
		{[]string{"backfill", "start", "--name", "x", "--archive", "file:///a", "--from", "2026-02-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"},
			"Error: --from 2026-02-01T00:00:00Z is not before --to 2026-01-01T00:00:00Z"},
		{[]string{"backfill", "status"}, "Error: --name is required"},
		{[]string{"backfill", "status", "--name", "x", "--timeout", "-1s", "--wait"}, "Error: --timeout -1s must not be negative"},
		{[]string{"checkpoint", "list", "--address", "no-port"}, `Error: --address "no-port": want host:port`},
		{[]string{"workers", "--address", "127.0.0.1:notaport"}, `Error: --address "127.0.0.1:notaport": want host:port, and "notaport" is no port`},
		{[]string{"checkpoint", "list", "--config-file", "/nonexistent/temporal.toml"}, `Error: --config-file "/nonexistent/temporal.toml": no such file or directory`},
		{[]string{"pipeline", "status", "--no-such-flag"}, "Error: unknown flag: --no-such-flag"},
		// A concurrency below 1 used to run as 1 without a word.
		{[]string{"archive", "ls", "--archive", "file:///nonexistent", "--concurrency", "0"}, "Error: --concurrency 0 must be at least 1"},
		{[]string{"archive", "verify", "--archive", "file:///nonexistent", "--concurrency", "-2"}, "Error: --concurrency -2 must be at least 1"},
		// The compaction policy's errors named its fields, not the flags.
		{[]string{"archive", "compact", "--archive", "file:///nonexistent", "--target-size", "0"}, `Error: --target-size "0" must be at least 1 byte`},
		{[]string{"archive", "compact", "--archive", "file:///nonexistent", "--small-file", "0B"}, `Error: --small-file "0B" must be at least 1 byte`},
		{[]string{"archive", "compact", "--archive", "file:///nonexistent", "--target-size", "1MiB", "--small-file", "2MiB"},
			`Error: --small-file "2MiB" is larger than --target-size "1MiB"`},
		{[]string{"archive", "compact", "--archive", "file:///nonexistent", "--min-age", "-1s"}, "Error: --min-age -1s must not be negative"},
		{[]string{"archive", "compact", "--archive", "file:///nonexistent", "--target-size", "6GiB", "--small-file", "1MiB"}, `Error: --target-size "6GiB" is larger than 5.0 GiB, the largest file size`},
		// --wait is implied: turning it off used to be accepted and ignored.
		{[]string{"checkpoint", "now", "--wait=false"}, "Error: --wait=false: checkpoint now always waits for its round (--timeout bounds the wait)"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, tc.args...)
			assert.Equal(t, exitUsage, r.code, "stderr: %s", r.err)
			assert.True(t, strings.HasPrefix(r.err, tc.want+"\n"), "stderr %q does not start with %q", r.err, tc.want)
			assert.Empty(t, r.out)
		})
	}
}

// TestConnectionFlags: the connection flags and variables reach the
// client as the Temporal CLI would use them (-v logs the target), and the
// API key never shows.
func TestConnectionFlags(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("sekret-from-file\n"), 0o600))
	cases := []struct {
		name   string
		env    map[string]string
		args   []string
		target string
	}{
		{"plaintext by default", nil, nil, "127.0.0.1:1 namespace=default"},
		{"--tls", nil, []string{"--tls"}, "127.0.0.1:1 namespace=default tls"},
		{"-n", nil, []string{"-n", "prod"}, "127.0.0.1:1 namespace=prod"},
		{"TEMPORAL_NAMESPACE", map[string]string{"TEMPORAL_NAMESPACE": "env-ns"}, nil, "127.0.0.1:1 namespace=env-ns"},
		{"TEMPORAL_API_KEY turns TLS on", map[string]string{"TEMPORAL_API_KEY": "sekret-from-env"}, nil, "127.0.0.1:1 namespace=default tls api-key=<redacted>"},
		{"--tls=false keeps it off", map[string]string{"TEMPORAL_API_KEY": "sekret-from-env"}, []string{"--tls=false"}, "127.0.0.1:1 namespace=default api-key=<redacted>"},
		{"TEMPORAL_TLS=false keeps it off", map[string]string{"TEMPORAL_API_KEY": "sekret-from-env", "TEMPORAL_TLS": "false"}, nil, "127.0.0.1:1 namespace=default api-key=<redacted>"},
		{"--api-key-file", nil, []string{"--api-key-file", keyFile}, "127.0.0.1:1 namespace=default tls api-key=<redacted>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			isolateTemporalConfig(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := run(t, append(tc.args, "--address", "127.0.0.1:1", "-v", "workers")...)
			assert.Equal(t, exitFailure, r.code, r.err)
			assert.Contains(t, r.err, `target="`+tc.target+`"`)
			assert.Contains(t, r.err, "Error: connect to temporal at "+tc.target+": ")
			assert.NotContains(t, r.err, "sekret")
		})
	}
}

// TestInterruptWhileConnecting: Ctrl-C while starter connects to an
// address that accepts connections but never answers (a firewall, a
// proxy, a server that hangs) waited out the client's 5 s connection
// timeout; the interrupt now stops the connecting at once.
func TestInterruptWhileConnecting(t *testing.T) {
	isolateTemporalConfig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- execute(ctx, []string{"--address", ln.Addr().String(), "workers"}, &out, &errOut) }()
	select {
	case c := <-accepted:
		accepted <- c // for the cleanup to close
	case <-time.After(5 * time.Second):
		t.Fatal("starter did not connect")
	}
	cancel() // as SIGINT does to main's context
	interrupted := time.Now()
	select {
	case code := <-done:
		assert.Equal(t, exitInterrupted, code, errOut.String())
		assert.Less(t, time.Since(interrupted), 2*time.Second, "it stops at the interrupt")
		assert.Equal(t, "Error: interrupted\n", errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("starter did not stop within 10s of the interrupt")
	}
}

func TestInterruptedExits130(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as SIGINT does to main's context
	var out, errOut bytes.Buffer
	code := execute(ctx, []string{"--address", "127.0.0.1:1", "workers"}, &out, &errOut)
	assert.Equal(t, exitInterrupted, code)
	assert.Equal(t, "Error: interrupted\n", errOut.String())
	// Success stays success.
	assert.Equal(t, exitOK, execute(ctx, []string{"version"}, &out, &errOut))
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
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	var stages fakeactivities.Stages
	startStageWorkers(t, srv, &stages, workflows.WorkerTaskQueue("w1"), workflows.WorkerTaskQueue(fakeactivities.DeadWorker), workflows.BackfillTaskQueue)
	addr := "--address=" + srv.HostPort

	// Nothing runs yet: listings are empty, not errors.
	for _, args := range [][]string{{"workers"}, {"pipeline", "status", "--pipeline", "cli"}, {"checkpoint", "list", "--pipeline", "cli"}} {
		r := run(t, append(args, addr)...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r.err)
		assert.Regexp(t, `^[A-Z][A-Z /]+\n$`, r.out, "%v: a header and no rows", args)
		assert.NotEmpty(t, r.err, "%v: a hint on stderr", args)
		for _, o := range []string{"--json", "-o=json"} {
			r = run(t, append(args, addr, o)...)
			require.Equal(t, exitOK, r.code, r.err)
			assert.Equal(t, "[]\n", r.out, "%v %s", args, o)
		}
		r = run(t, append(args, addr, "-o", "yaml")...)
		require.Equal(t, exitOK, r.code, r.err)
		assert.Equal(t, "[]\n", r.out, "%v -o yaml", args)
	}
	r := run(t, "pipeline", "stop", addr, "--pipeline", "cli")
	assert.Equal(t, exitNotFound, r.code, "stop acts on the named pipeline, which runs nothing: %s", r.err)
	assert.Contains(t, r.err, `Error: pipeline "cli" runs no checkpoint coordinator`)
	r = run(t, "checkpoint", "now", addr, "--pipeline", "cli", "--timeout", "5s")
	assert.Equal(t, exitNotFound, r.code, "no coordinator to ask: %s", r.err)

	r = run(t, "pipeline", "start", addr, "--pipeline", "cli", "--interval", "1h", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var started map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &started), r.out)
	assert.Equal(t, workflows.CoordinatorWorkflowID("cli"), started["workflow_id"])
	// Starting again keeps the running coordinator (idempotent).
	r = run(t, "pipeline", "start", addr, "--pipeline", "cli", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var again map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &again), r.out)
	assert.Equal(t, started["run_id"], again["run_id"])

	// A worker announces its two shards, as the pipeline runtime does.
	ms, err := fakeactivities.NewMemoryShards("cli", 2, 4, 8, memory.New(), "w1")
	require.NoError(t, err)
	rw := worker.New(srv.Client, workflows.WorkerTaskQueue("w1-rounds"), worker.Options{})
	rw.RegisterActivity(&activities.Rounds{Host: ms.Hosts["w1"]})
	require.NoError(t, rw.Start())
	t.Cleanup(rw.Stop)
	_, err = workflows.Announce(context.Background(), srv.Client, workflows.CoordinatorInput{Pipeline: "cli"},
		workflows.Announcement{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1-rounds"), Shards: ms.Announcements()["w1"]})
	require.NoError(t, err)

	r = run(t, "checkpoint", "now", addr, "--pipeline", "cli", "--timeout", "30s", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var now struct {
		Round map[string]any `json:"round"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &now), r.out)
	assert.Equal(t, 2.0, now.Round["ok"])
	// Durations are strings, zero times are left out.
	d, ok := now.Round["duration"].(string)
	require.True(t, ok, "duration is a string: %#v", now.Round["duration"])
	_, err = time.ParseDuration(d)
	require.NoError(t, err)
	assert.NotContains(t, r.out, "0001-01-01")

	// Visibility is eventually consistent: wait for the coordinator to be
	// listed with its search attributes.
	var listed []workflowExecution
	require.Eventually(t, func() bool {
		r = run(t, "checkpoint", "list", addr, "--pipeline", "cli", "--json")
		listed = nil
		return r.code == exitOK && json.Unmarshal([]byte(r.out), &listed) == nil && len(listed) == 1 && listed[0].Breaker != ""
	}, 30*time.Second, 200*time.Millisecond, "checkpoint list: %s %s", r.out, r.err)
	assert.Equal(t, "cli", listed[0].Pipeline)
	assert.Equal(t, workflows.BreakerClosed, listed[0].Breaker)
	assert.Equal(t, "running", listed[0].Status, "one casing for statuses")
	assert.Equal(t, workflows.CoordinatorWorkflowID("cli"), listed[0].ID)

	r = run(t, "pipeline", "status", addr, "--pipeline", "cli")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "SHARD")
	assert.Regexp(t, `cli/0\s+w1\s+1\s+ok\s+1\s+1\s+\S+\s+[0-9.]+(µs|ms|s) ago\s+[0-9.]+(µs|ms|s)\s`, r.out, "age and duration are short strings")
	assert.Regexp(t, `cli/1\s+w1\s+1\s+ok\s`, r.out)
	r = run(t, "pipeline", "status", addr, "--pipeline", "cli", "-o", "yaml")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "- shard: cli/0\n  owner:\n", "YAML keeps the fields' order")
	assert.Regexp(t, `duration: [0-9.]+(µs|ms|s)\n`, r.out)

	r = run(t, "pipeline", "stop", addr, "--pipeline", "cli")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "asked the checkpoint coordinator of cli")
	var final workflows.CoordinatorState
	require.NoError(t, srv.Client.GetWorkflow(context.Background(), workflows.CoordinatorWorkflowID("cli"), "").Get(context.Background(), &final))
	assert.Equal(t, uint64(1), final.Round)

	r = run(t, "pipeline", "status", addr, "--pipeline", "nobody", "--json")
	assert.Equal(t, exitOK, r.code, r.err)
	assert.Equal(t, "[]\n", r.out)

	r = run(t, "backfill", "start", addr, "--name", "cli-bf", "--archive", "file:///archive", "--window", "2", "--wait")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "100%")
	assert.Contains(t, r.out, "files 3/3")
	assert.NotContains(t, r.out, "\r", "no carriage returns when stdout is not a terminal")
	assert.Equal(t, int64(3), stages.Replayed.Load())

	r = run(t, "backfill", "status", addr, "--name", "cli-bf", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var bf struct {
		Status   string         `json:"status"`
		Progress map[string]any `json:"progress"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &bf), r.out)
	assert.Equal(t, "completed", bf.Status)
	assert.IsType(t, "", bf.Progress["eta"], "the ETA is a duration string")
	r = run(t, "backfill", "status", addr, "--name", "cli-bf", "--wait", "--timeout", "10s")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "completed")

	// Workers: one alive, heartbeating the shard it holds; one that dies.
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
			sawDead = sawDead || l.WorkerID == fakeactivities.DeadWorker && l.Status == workflows.LeaseDead && len(l.Handoffs) == 1 &&
				l.Execution != "running" // ended: listed only with --all below
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
	assert.Regexp(t, `w-alive\s+alive\s+0\s+[0-9.]+(ms|s) ago\s`, r.out)

	r = run(t, "backfill", "status", addr, "--name", "missing")
	assert.Equal(t, exitNotFound, r.code, r.err)
	assert.Equal(t, "Error: no backfill named \"missing\"\n", r.err)
	r = run(t, "backfill", "cancel", addr, "--name", "missing")
	assert.Equal(t, exitNotFound, r.code, r.err)

	// The connection as the Temporal CLI finds it: a profile of its config
	// file, named by flags or by TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE,
	// or TEMPORAL_ADDRESS.
	cfg := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, "[profile.dev]\naddress = %q\n", srv.HostPort), 0o600))
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"--config-file and --profile", nil, []string{"--config-file", cfg, "--profile", "dev"}},
		{"TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE", map[string]string{"TEMPORAL_CONFIG_FILE": cfg, "TEMPORAL_PROFILE": "dev"}, nil},
		{"TEMPORAL_ADDRESS", map[string]string{"TEMPORAL_ADDRESS": srv.HostPort}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := run(t, append(tc.args, "checkpoint", "list", "--pipeline", "cli", "--all")...)
			require.Equal(t, exitOK, r.code, r.err)
			assert.Contains(t, r.out, workflows.CoordinatorWorkflowID("cli"))
		})
	}
}

// isolateTemporalConfig keeps the user's own Temporal CLI config and
// TEMPORAL_* variables out of a test.
func isolateTemporalConfig(t *testing.T) {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TEMPORAL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// TestCheckpointNowWaitsOnTheCoordinator: with a coordinator running,
// checkpoint now is a Workflow Update that returns the round's summary
// (it used to signal each shard and poll its state every 200ms).
func TestCheckpointNowWaitsOnTheCoordinator(t *testing.T) {
	srv := temporaltest.Start(t)
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.CoordinatorWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	ms, err := fakeactivities.NewMemoryShards("cli", 3, 4, 8, memory.New(), "w1")
	require.NoError(t, err)
	w := worker.New(srv.Client, workflows.WorkerTaskQueue("w1"), worker.Options{})
	w.RegisterActivity(&activities.Rounds{Host: ms.Hosts["w1"]})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	in := workflows.CoordinatorInput{Pipeline: "cli", Manual: true}
	_, err = workflows.Announce(context.Background(), srv.Client, in, workflows.Announcement{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"),
		Shards: ms.Announcements()["w1"]})
	require.NoError(t, err)
	addr := "--address=" + srv.HostPort

	r := run(t, "checkpoint", "now", addr, "--pipeline", "cli", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var out struct {
		Coordinator string                 `json:"coordinator"`
		Round       workflows.RoundSummary `json:"round"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &out))
	assert.Equal(t, workflows.CoordinatorWorkflowID("cli"), out.Coordinator)
	assert.Equal(t, uint64(1), out.Round.Round, "a manual coordinator runs a round only when asked")
	assert.Equal(t, 3, out.Round.OK)
	assert.Equal(t, "checkpoint now: starter checkpoint now", out.Round.Reason)

	r = run(t, "checkpoint", "now", addr, "--pipeline", "cli")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "round 2: 1 workers, 3 shards")

	r = run(t, "checkpoint", "now", addr, "--pipeline", "cli", "--shard", "cli/0")
	assert.Equal(t, exitUsage, r.code, "--shard is gone: rounds checkpoint every shard: %s", r.err)
}

// TestOperatorsListsTheRegistry: `starter operators` lists every type of
// the default registry with its parameters; --json is the same as data;
// an unknown type is a usage error (exit 2) naming the types that exist
// (bug: it named none, only "starter operators lists them").
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

	// A type that does not exist is a mistyped argument: a usage error.
	r = run(t, "operators", "smaa")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.err, `unknown operator type "smaa" (known: `)
	for _, typ := range pipeline.DefaultRegistry().Types() {
		require.Contains(t, r.err, typ.Name, "the error lists the known types")
	}
	require.Empty(t, r.out)
}

// TestCommandsWithoutWorkersOrNamespace: against a Temporal that runs no
// tflo worker, or a namespace that does not exist, the commands say so.
// Bugs it guards against: CoordinatorRunning took any error containing
// "not found" for a missing coordinator, so -n with a mistyped namespace
// printed an empty pipeline status (exit 0) and made pipeline stop and
// checkpoint now exit 3 "runs no checkpoint coordinator"; backfill start
// with the name of a running backfill printed "started" and exited 0
// while the running one went on with its own archive and sink; backfill
// status printed a bare "context deadline exceeded" after 10s when no
// worker answered its query, and --timeout did not bound that query.
func TestCommandsWithoutWorkersOrNamespace(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort

	for _, args := range [][]string{{"pipeline", "status"}, {"pipeline", "stop"}, {"checkpoint", "now", "--timeout", "5s"}} {
		r := run(t, append(args, addr, "-n", "nosuchns")...)
		assert.Equal(t, exitFailure, r.code, "%v in a namespace that does not exist: %s", args, r.err)
		assert.Contains(t, r.err, "nosuchns", "%v names the namespace", args)
		assert.NotContains(t, r.err, "runs no checkpoint coordinator", args)
	}

	// No worker serves the control task queue: the backfill stays running.
	r := run(t, "backfill", "start", addr, "--name", "dup", "--archive", "file:///archive", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	var first map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &first), r.out)
	r = run(t, "backfill", "start", addr, "--name", "dup", "--archive", "file:///other", "--sink", "kafka:elsewhere")
	assert.Equal(t, exitFailure, r.code, "the running backfill keeps its own input: %s %s", r.out, r.err)
	assert.Contains(t, r.err, `Error: backfill "dup" is already running`)
	assert.NotContains(t, r.out, "started")
	d, err := srv.Client.DescribeWorkflow(context.Background(), workflows.BackfillWorkflowID("dup"), "")
	require.NoError(t, err)
	assert.Equal(t, first["run_id"], d.WorkflowExecution.RunID, "still the first run")

	start := time.Now()
	r = run(t, "backfill", "status", addr, "--name", "dup", "--wait", "--timeout", "2s")
	assert.Less(t, time.Since(start), 8*time.Second, "no query waits on a worker that is not there")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Contains(t, r.err, `Error: backfill "dup" (workflow tflo-backfill:dup) runs, but no worker answers its status query: no control worker polls task queue tflo-control`)
}

// TestHelpOfAnUnknownCommandIsAUsageError: "starter help X" for a command
// that does not exist is bad usage (exit 2, on stderr), as "starter X" is;
// cobra's help command printed "Unknown help topic" to stdout and exited 0.
func TestHelpOfAnUnknownCommandIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"help", "bogus"}, {"help", "pipeline", "bogus"}} {
		r := run(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: stdout %q", args, r.out)
		assert.Contains(t, r.err, fmt.Sprintf("Error: unknown help topic %q", strings.Join(args[1:], " ")))
		assert.Empty(t, r.out)
	}
	r := run(t, "help", "pipeline", "start")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "starter pipeline start [flags]")
	r = run(t, "help")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "Exit codes:")
}

// TestOperatorsNamedTwiceListsOnce: "starter operators sma sma" printed
// sma twice (and two entries under --json).
func TestOperatorsNamedTwiceListsOnce(t *testing.T) {
	r := run(t, "operators", "sma", "sma")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Equal(t, 1, strings.Count(r.out, "sma — "), r.out)

	r = run(t, "operators", "--json", "sma", "bollinger", "sma")
	require.Equal(t, exitOK, r.code, r.err)
	var types []struct {
		Name string `json:"name"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &types), r.out)
	require.Len(t, types, 2)
	assert.Equal(t, "sma", types[0].Name)
	assert.Equal(t, "bollinger", types[1].Name)
}

// TestClientClosedAfterAFailedCommand: the Temporal client was closed by
// a PersistentPostRun, which cobra skips when the command fails, so every
// failed command left its connection open.
func TestClientClosedAfterAFailedCommand(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"checkpoint", "now", "--pipeline", "nosuch"}, exitNotFound},
		{[]string{"checkpoint", "list", "--pipeline", "nosuch"}, exitOK},
	} {
		var out, errOut bytes.Buffer
		root, a := newRoot(&out, &errOut)
		code := executeRoot(ctx, root, a, append(tc.args, "--address="+srv.HostPort))
		require.Equal(t, tc.code, code, "%v: %s", tc.args, &errOut)
		require.NotNil(t, a.client, "%v dialed", tc.args)
		_, err := a.client.CheckHealth(ctx, &client.CheckHealthRequest{})
		assert.Error(t, err, "%v: the client is closed once the command has run", tc.args)
	}
}

// TestCommandsWithoutAControlWorker: with tflo's workflows running but
// no control worker polling their task queue, checkpoint now waited out
// --timeout and said the round "goes on" (none had started), and workers
// failed after ~10s with the server's bare deadline error (pipeline
// status after ~10s too). All say at once that no control worker polls
// tflo-control and how to start one.
func TestCommandsWithoutAControlWorker(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	ctx := context.Background()
	// Started by type name: no worker runs them.
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.CoordinatorWorkflowID("cli"), TaskQueue: workflows.ControlTaskQueue},
		"CoordinatorWorkflow", workflows.CoordinatorInput{Pipeline: "cli", Manual: true})
	require.NoError(t, err)
	startUnservedLease(t, srv, "w1")

	start := time.Now()
	r := run(t, "checkpoint", "now", addr, "--pipeline", "cli", "--timeout", "20s")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Contains(t, r.err, `Error: pipeline "cli": no round started: no control worker polls task queue tflo-control`)
	assert.Contains(t, r.err, "control_worker: true")
	assert.NotContains(t, r.err, "goes on")
	assert.Less(t, time.Since(start), 10*time.Second, "it does not wait out --timeout")

	// pipeline status waited ~10s for the shards query, then failed.
	start = time.Now()
	r = run(t, "pipeline", "status", addr, "--pipeline", "cli")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Contains(t, r.err, "Error: checkpoint coordinator "+workflows.CoordinatorWorkflowID("cli")+" runs, but no worker answers its shards query: no control worker polls task queue tflo-control")
	assert.Empty(t, r.out)
	assert.Less(t, time.Since(start), 5*time.Second, "it does not wait for the query to time out")

	start = time.Now()
	r = run(t, "workers", addr)
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Contains(t, r.err, "Error: lease workflow "+workflows.LeaseWorkflowIDPrefix+"w1 runs, but no worker answers its status query: no control worker polls task queue tflo-control")
	assert.Contains(t, r.err, "control_worker: true")
	assert.Less(t, time.Since(start), 5*time.Second, "it does not wait for the query to time out")
}

// startStageWorkers starts on srv a control worker running tflo's
// workflows and, on each of queues, a worker of stages' stand-in
// activities, all stopped when the test ends. It returns the latter, in
// the order of queues: one stopped waits up to 10s for its activities to
// return and report (a test stops one to leave its activities' retries
// waiting for a worker).
func startStageWorkers(t *testing.T, srv *temporaltest.Server, stages *fakeactivities.Stages, queues ...string) []worker.Worker {
	t.Helper()
	ctl := worker.New(srv.Client, workflows.ControlTaskQueue, worker.Options{})
	ctl.RegisterWorkflow(workflows.CoordinatorWorkflow)
	ctl.RegisterWorkflow(workflows.BackfillWorkflow)
	ctl.RegisterWorkflow(workflows.LeaseWorkflow)
	ctl.RegisterWorkflow(workflows.HandoffWorkflow)
	require.NoError(t, ctl.Start())
	t.Cleanup(ctl.Stop)
	var ws []worker.Worker
	for _, q := range queues {
		w := worker.New(srv.Client, q, worker.Options{WorkerStopTimeout: 10 * time.Second})
		stages.Register(w)
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
		ws = append(ws, w)
	}
	return ws
}

// startUnservedLease starts the lease workflow of worker id by type name
// (no worker of the test runs it: only what polls tflo-control takes its
// tasks) and returns once the visibility API lists it, where starter
// workers looks. A workflow task a silent poller took stays started for
// a minute, not the default 10s, after which a query fails at once
// ("Workflow Task in failed state") instead of waiting for an answer.
func startUnservedLease(t *testing.T, srv *temporaltest.Server, id string) {
	t.Helper()
	ctx := context.Background()
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.LeaseWorkflowID(id), TaskQueue: workflows.ControlTaskQueue,
		WorkflowTaskTimeout: time.Minute},
		"LeaseWorkflow", workflows.LeaseInput{WorkerID: id, TaskQueue: workflows.WorkerTaskQueue(id)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := srv.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowType = 'LeaseWorkflow' AND WorkflowId = " + quote(workflows.LeaseWorkflowID(id))})
		return err == nil && len(resp.Executions) == 1
	}, 10*time.Second, 50*time.Millisecond, "the lease of %s is visible", id)
}

// TestSecondInterruptStopsAtOnce: the first Ctrl-C cancels the command's
// context (the demo drains); a second one, while it stops, exits 130 at
// once with a message. signal.NotifyContext kept catching the signal, so
// the second Ctrl-C was ignored.
func TestSecondInterruptStopsAtOnce(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	var errOut logtest.Buffer
	exited := make(chan int, 1)
	ctx, stop := interruptContext(context.Background(), sigs, &errOut, func(code int) { exited <- code })
	defer stop()

	sigs <- os.Interrupt
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first interrupt did not cancel the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first interrupt exited %d: it only cancels", code)
	default:
	}

	sigs <- os.Interrupt
	select {
	case code := <-exited:
		assert.Equal(t, exitInterrupted, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the second interrupt was ignored")
	}
	assert.Equal(t, "Error: interrupted again: stopping at once, without a clean stop\n", errOut.String())
}

// TestFailedStopAfterInterruptIsReported: a command whose clean stop
// fails after Ctrl-C (the demo's drain: a final checkpoint that failed)
// reports that failure, exit 1; execute took any error after an
// interrupt for the interrupt ("Error: interrupted", exit 130). Any
// other error after an interrupt still is.
func TestFailedStopAfterInterruptIsReported(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		msg  string
	}{
		{stopError{errors.New("demo: final checkpoint of shard signals/0: disk full")}, exitFailure, "Error: demo: final checkpoint of shard signals/0: disk full\n"},
		{errors.New("query: context canceled"), exitInterrupted, "Error: interrupted\n"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut bytes.Buffer
		root, a := newRoot(&out, &errOut)
		root.AddCommand(&cobra.Command{Use: "drain", RunE: func(*cobra.Command, []string) error {
			cancel() // Ctrl-C while it runs
			return tc.err
		}})
		finishTree(root)
		code := executeRoot(ctx, root, a, []string{"drain"})
		assert.Equal(t, tc.code, code, errOut.String())
		assert.Equal(t, tc.msg, errOut.String())
	}
}

// TestPipelineStartNamesSettingsNotApplied: starting the coordinator of a
// pipeline that runs one keeps it, with its own settings; the settings
// given were accepted and dropped without a word. They are named on
// stderr, and the run kept is the one printed.
func TestPipelineStartNamesSettingsNotApplied(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	r := run(t, "pipeline", "start", addr, "--pipeline", "kept", "--interval", "1h", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Empty(t, r.err)
	var first map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &first), r.out)

	r = run(t, "pipeline", "start", addr, "--pipeline", "kept", "--interval", "5s", "--manual", "--json")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Equal(t, "not applied: --interval 5s, --manual true: the checkpoint coordinator "+workflows.CoordinatorWorkflowID("kept")+
		" already runs and keeps its own settings (starter pipeline stop ends it)\n", r.err)
	var again map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &again), r.out)
	assert.Equal(t, first, again, "the running coordinator is kept")

	// Nothing given: nothing to report.
	r = run(t, "pipeline", "start", addr, "--pipeline", "kept")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Empty(t, r.err)
	assert.Equal(t, "checkpoint coordinator "+workflows.CoordinatorWorkflowID("kept")+" running (pipeline kept)\n", r.out)
}

// TestMissingSearchAttributesAreExplained: in a namespace without tflo's
// search attributes, checkpoint list and pipeline start failed with the
// server's "column name 'TfloPipeline' is not a valid search attribute"
// or "no mapping defined", not saying what to do; they say how to
// register them in that namespace.
func TestMissingSearchAttributesAreExplained(t *testing.T) {
	isolateTemporalConfig(t)
	srv := temporaltest.Start(t)
	addr := "--address=" + srv.HostPort
	ctx := context.Background()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: srv.HostPort})
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: "bare", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}))

	hint := `(tflo's search attributes are not registered in namespace "bare": temporal operator search-attribute create --namespace bare --name TfloPipeline --type Keyword --name TfloBreakerState --type Keyword; see the README's Search attributes)`
	var r result
	require.Eventually(t, func() bool {
		r = run(t, "checkpoint", "list", addr, "-n", "bare")
		return !strings.Contains(r.err, "not found") // the namespace is there
	}, 30*time.Second, 200*time.Millisecond, "namespace bare is ready")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Contains(t, r.err, `Error: list the checkpoint coordinators of pipeline "iot-portal": `)
	assert.True(t, strings.HasSuffix(r.err, hint+"\n"), r.err)

	r = run(t, "pipeline", "start", addr, "-n", "bare")
	assert.Equal(t, exitFailure, r.code, r.err)
	assert.Contains(t, r.err, `Error: start the checkpoint coordinator of "iot-portal": `)
	assert.True(t, strings.HasSuffix(r.err, hint+"\n"), r.err)

	// Where they are registered, no hint.
	r = run(t, "checkpoint", "list", addr)
	assert.Equal(t, exitOK, r.code, r.err)
	assert.NotContains(t, r.err, "search attributes")
}
