// Package workflows holds tflo's Temporal workflows: the checkpoint
// coordinator of a pipeline, shard handoff, lease supervision and Parquet
// backfills, plus the client calls that drive them (Announce,
// CheckpointRoundNow, CoordinatorStartOptions) and their registration with
// Worker Versioning (Register, ControlDeployment).
//
// Only deterministic code runs in workflows (checked by workflowcheck in
// make lint); every side effect is an activity from package activities,
// called by reference. Records never travel through workflow history:
// inputs and results carry offsets, object keys, counts and durations
// (durations as text, activities.Duration).
//
// Main types:
//   - CoordinatorWorkflow: one per pipeline; numbered checkpoint rounds,
//     one activity per live worker (activities.CheckpointHost), owners
//     announced by the workers, one breaker over storage failures.
//   - HandoffWorkflow: moves a shard (final checkpoint, epoch check,
//     restore, resume); LeaseWorkflow: one per worker, sees it die (a
//     worker that stops gracefully ends it with SignalStop).
//   - BackfillWorkflow: replays an archive partition by partition, Window
//     partitions at once, many files per activity, and continues as new
//     carrying its lanes, so an archive of any size keeps its history
//     small (a 50,000-file archive: at most about 2,200 events per run).
//
// Concurrency: workflow code runs on Temporal's workflow goroutines; the
// client helpers are safe for concurrent use.
package workflows
