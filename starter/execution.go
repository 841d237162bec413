package main

import (
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tflo-io/tflo/workflows"
)

// workflowExecution is one visibility record with tflo's search attributes
// decoded.
type workflowExecution struct {
	ID       string    `json:"workflow_id"`
	RunID    string    `json:"run_id"`
	Type     string    `json:"type"`
	Status   string    `json:"status"` // running, completed, failed, ... (executionStatus)
	Started  time.Time `json:"started"`
	Closed   time.Time `json:"closed,omitzero"`
	Pipeline string    `json:"pipeline,omitempty"`
	Breaker  string    `json:"breaker,omitempty"`
}

func newExecution(e *workflowpb.WorkflowExecutionInfo) *workflowExecution {
	x := &workflowExecution{
		ID:     e.GetExecution().GetWorkflowId(),
		RunID:  e.GetExecution().GetRunId(),
		Type:   e.GetType().GetName(),
		Status: executionStatus(e.GetStatus()),
	}
	if t := e.GetStartTime(); t != nil {
		x.Started = t.AsTime()
	}
	if t := e.GetCloseTime(); t != nil {
		x.Closed = t.AsTime()
	}
	fields := e.GetSearchAttributes().GetIndexedFields()
	dc := converter.GetDefaultDataConverter()
	str := func(name string) string {
		var s string
		if p, ok := fields[name]; ok {
			_ = dc.FromPayload(p, &s) // an undecodable attribute shows as empty
		}
		return s
	}
	x.Pipeline = str(workflows.SearchPipeline.GetName())
	x.Breaker = str(workflows.SearchBreakerState.GetName())
	return x
}
