package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// failingFlushes is a recorder whose first n Flushes fail.
type failingFlushes struct {
	*recorder
	n atomic.Int64
}

func (f *failingFlushes) Flush(ctx context.Context, s streaming.ShardID, id streaming.CheckpointID) error {
	if f.n.Add(-1) >= 0 {
		return errors.New("flush refused")
	}
	return f.recorder.Flush(ctx, s, id)
}

// TestLocalCheckpointsHaveNoBreaker: checkpoint.breaker_threshold and
// breaker_cool_down were documented as if every worker had a breaker; it
// is the Temporal checkpoint coordinator's, and a worker without
// Temporal tries again at the next interval however many checkpoints
// failed. This pins what the corrected documentation says (it passed
// before the fix, which is to the documentation only).
func TestLocalCheckpointsHaveNoBreaker(t *testing.T) {
	c := newCluster(t, 1)
	sink := &failingFlushes{recorder: newRecorder()}
	sink.n.Store(3)
	p := alarmPipeline(c.ListenAddrs(), "", pipeline.Use(sink))
	p.Checkpoint = pipeline.Checkpoint{Interval: 50 * time.Millisecond, BreakerThreshold: 1, BreakerCoolDown: time.Hour}
	r := start(t, p, pipeline.WithWorkerID("plant-1"))
	produce(t, c.ListenAddrs(), makeReadings(1, 0, 3))
	r.waitFor(t, func() bool { return r.w.Stats().Checkpoints > 0 && sink.n.Load() < 0 }, 30*time.Second,
		"a checkpoint completes after three failed ones, past the threshold, without waiting out the cool-down")
}
