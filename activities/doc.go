// Package activities adapts tflo's streaming, coordination and connector
// packages to Temporal activities. It is the only place where errors are
// classified as retryable, non-retryable or benign for Temporal.
//
// Activities are methods on structs holding their dependencies
// (Checkpoints over a Shards registry); workers register the structs and
// workflows call the methods by reference. Activities that touch a
// worker's in-process state run on that worker's own task queue and carry
// the owner epoch they were scheduled for; a worker that no longer owns the
// shard at that epoch refuses with the non-retryable ErrTypeNotOwner.
//
// Concurrency: every exported type is safe for concurrent use.
package activities
