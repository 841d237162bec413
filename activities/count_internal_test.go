package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/activity"
)

// TestCountStalledWithNoHeartbeat: a count none of whose attempts
// heartbeated (each failed before the first file, as on a store that
// refuses every listing) gives up once it was scheduled more than
// CountStallLimit ago; a first attempt never does (it may have waited
// long for a worker).
func TestCountStalledWithNoHeartbeat(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	long := now.Add(-CountStallLimit - time.Minute)
	err := countProgress{}.stalled(activity.Info{Attempt: 40, ScheduledTime: long}, now)
	assert.ErrorContains(t, err, "attempt 40 gives up: 1h1m0s since it was scheduled, with no progress heartbeated")
	assert.NoError(t, countProgress{}.stalled(activity.Info{Attempt: 1, ScheduledTime: long}, now))
	assert.NoError(t, countProgress{}.stalled(activity.Info{Attempt: 40, ScheduledTime: now.Add(-time.Minute)}, now))
}
