// Package activities adapts tflo's streaming, coordination and connector
// packages to Temporal activities. It is the only place where errors are
// classified as retryable, non-retryable or benign for Temporal.
//
// Status: not built yet (see the Temporal slow-path issue).
package activities
