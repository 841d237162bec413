package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Worker Versioning (see DESIGN.md, "Rolling out new workflow code"):
//
//   - the control queue's worker is versioned (ControlDeployment): a
//     release is a deployment version; Temporal routes new workflows to the
//     current version and keeps each pinned run on the version it started;
//   - every workflow is pinned: a run never meets code it did not start
//     with. The coordinator and the lease, which run for as long as the
//     pipeline, move to the current version at their next continue-as-new
//     (ContinueAsNewVersioningBehaviorAutoUpgrade), so an old version
//     drains within one run; handoffs and backfills finish where they
//     started;
//   - the workers' own activity queues (tflo-worker-<id>) and the backfill
//     queue stay unversioned: their activities are the shard host's API,
//     compatible across releases, and a pinned workflow's activities run on
//     whatever worker polls the queue.

// Register registers tflo's workflows on a control-queue worker with
// their versioning behaviour (pinned; ignored by an unversioned worker).
func Register(w worker.WorkflowRegistry) {
	pinned := workflow.RegisterOptions{VersioningBehavior: workflow.VersioningBehaviorPinned}
	for _, wf := range []any{CoordinatorWorkflow, HandoffWorkflow, LeaseWorkflow, BackfillWorkflow} {
		w.RegisterWorkflowWithOptions(wf, pinned)
	}
}

// ControlDeployment returns the deployment options of a control-queue
// worker of build buildID in deployment (a release of the pipeline's
// workers): versioned, with the workflows pinned by default. An empty
// deployment leaves the worker unversioned.
func ControlDeployment(deployment, buildID string) worker.DeploymentOptions {
	if deployment == "" {
		return worker.DeploymentOptions{}
	}
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: buildID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}
}
