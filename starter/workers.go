package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/workflows"
)

// workerLease is one worker as its lease workflow sees it.
type workerLease struct {
	WorkerID      string                 `json:"worker_id"`
	WorkflowID    string                 `json:"workflow_id"`
	RunID         string                 `json:"run_id"`
	Execution     string                 `json:"execution"` // running, completed, failed, ... (executionStatus)
	Status        string                 `json:"status"`    // alive, stopped, dead
	Restarts      int                    `json:"restarts"`
	LastHeartbeat time.Time              `json:"last_heartbeat,omitzero"`
	Shards        []activities.HeldShard `json:"shards,omitempty"`
	Handoffs      []string               `json:"handoffs,omitempty"`
	LastError     string                 `json:"last_error,omitempty"`
}

func (a *app) workersCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the workers' lease workflows: alive, stopped or dead, their shards and lease errors",
		Long: `List the workers' lease workflows (one per pipeline worker running with Temporal, id "` + workflows.LeaseWorkflowIDPrefix + `<worker>").

A running lease is "alive": its activity on the worker's own task queue heartbeats
the shards the worker holds (SHARDS, as of LAST HEARTBEAT). RESTARTS counts the
times the worker's coordination leases were lost and the activity restarted
(LAST ERROR says why). With --all, ended leases are listed too: "stopped" (a clean
shutdown) or "dead" (the heartbeat timed out; HANDOFFS are the handoffs it started).
No worker connected prints an empty table ([] under -o json) and exits 0. A running
lease with no control worker polling task queue tflo-control (nothing would answer
its status query) exits 1 at once, saying so.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			leases, err := listLeases(cmd.Context(), c, all)
			if err != nil {
				return err
			}
			t := leasesTable(leases)
			if all {
				t.empty = "no lease workflows: no worker has connected to this namespace"
			} else {
				t.empty = "no running lease workflows: no worker is connected to this namespace (--all lists ended ones)"
			}
			return a.emitTable(leases, t)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also list ended lease workflows (stopped or dead workers)")
	return cmd
}

func listLeases(ctx context.Context, c client.Client, all bool) ([]workerLease, error) {
	q := "WorkflowType = 'LeaseWorkflow'"
	if !all {
		q += " AND ExecutionStatus = 'Running'"
	}
	out := []workerLease{}
	var token []byte
	checked := false // for a control worker, once: a running lease needs one to answer its query
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list lease workflows: %w", err)
		}
		for _, e := range resp.Executions {
			x := newExecution(e)
			id := strings.TrimPrefix(x.ID, workflows.LeaseWorkflowIDPrefix)
			if u, err := url.PathUnescape(id); err == nil {
				id = u
			}
			l := workerLease{WorkerID: id, WorkflowID: x.ID, RunID: x.RunID}
			if !checked && e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				checked = true
				// Without one the status query waits ~10s, then fails
				// with the server's bare deadline error.
				if err := noControlWorker(ctx, c, fmt.Sprintf("lease workflow %s runs, but no worker answers its status query", x.ID)); err != nil {
					return nil, err
				}
			}
			if err := describeLease(ctx, c, &l); err != nil {
				return nil, err
			}
			if !all && l.Execution != executionStatus(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING) {
				continue // visibility lags: it has ended since
			}
			out = append(out, l)
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			return out, nil
		}
	}
}

// describeLease fills l from the workflow (visibility may lag, so its
// execution status comes from a describe): the status query and the
// pending activity's last heartbeat while it runs, its result once ended.
func describeLease(ctx context.Context, c client.Client, l *workerLease) error {
	d, err := c.DescribeWorkflow(ctx, l.WorkflowID, l.RunID)
	if err != nil {
		return fmt.Errorf("describe %s: %w", l.WorkflowID, err)
	}
	status := d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
	l.Execution = executionStatus(status)
	var st workflows.LeaseState
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		asked := time.Now()
		v, err := c.QueryWorkflow(ctx, l.WorkflowID, l.RunID, workflows.QueryStatus)
		if err != nil {
			return fmt.Errorf("query %s: %w%s", l.WorkflowID, err, noWorkerHint(ctx, c, err, time.Since(asked)))
		}
		if err := v.Get(&st); err != nil {
			return fmt.Errorf("decode status of %s: %w", l.WorkflowID, err)
		}
		for _, pa := range d.RawResponse.GetPendingActivities() {
			if pa.GetActivityType().GetName() != "KeepLeases" {
				continue
			}
			if t := pa.GetLastHeartbeatTime(); t != nil {
				l.LastHeartbeat = t.AsTime()
			}
			if pa.GetHeartbeatDetails() != nil {
				_ = converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &l.Shards) // undecodable: no shards shown
			}
		}
	} else {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second) // it has ended: its result is there
		err := c.GetWorkflow(gctx, l.WorkflowID, l.RunID).Get(gctx, &st)
		cancel()
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) {
			l.LastError = err.Error() // failed or terminated: its error is the news
		}
		l.Shards = st.Orphaned
	}
	l.Status, l.Restarts, l.Handoffs = st.Status, st.Restarts, st.Handoffs
	if l.LastError == "" {
		l.LastError = st.LastErr
	}
	return nil
}

// leasesTable is the workers table.
func leasesTable(leases []workerLease) *table {
	t := newTable("WORKER", "STATUS", "RESTARTS", "LAST HEARTBEAT", "SHARDS", "HANDOFFS", "LAST ERROR")
	for _, l := range leases {
		status := l.Status
		if status == "" {
			status = l.Execution
		}
		var shards []string
		for _, s := range l.Shards {
			shards = append(shards, fmt.Sprintf("%s/%s@%d", s.Pipeline, s.Shard, s.Epoch))
		}
		t.add(l.WorkerID, status, l.Restarts, age(l.LastHeartbeat), strings.Join(shards, ","), len(l.Handoffs), oneLine(l.LastError, 80))
	}
	return t
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
