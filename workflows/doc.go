// Package workflows holds tflo's Temporal workflows: checkpoint
// orchestration, shard handoff, lease supervision and Parquet backfills.
// Only deterministic code lives here (checked by workflowcheck in make
// lint); every side effect is an activity from package activities, called
// by reference. Records never travel through workflow history: inputs and
// results carry offsets, object keys, counts and durations.
//
// BackfillWorkflow replays an archive partition by partition, Window
// partitions at once, many files per activity, and continues as new
// carrying its lanes, so an archive of any size keeps its history small
// (a 50,000-file archive: at most about 2,200 events per run).
package workflows
