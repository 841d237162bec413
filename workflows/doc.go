// Package workflows holds tflo's Temporal workflows: checkpoint
// orchestration, shard handoff, lease supervision and Parquet backfills.
// Only deterministic code lives here (checked by workflowcheck in make
// lint); every side effect is an activity from package activities, called
// by reference. Records never travel through workflow history: inputs and
// results carry offsets, object keys, counts and durations.
//
// Status: not built yet (see the Temporal slow-path issue).
package workflows
