package activities

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

type nopCut struct{}

func (nopCut) Cursor() (string, []byte)                         { return "seq", []byte{1} }
func (nopCut) Pieces(context.Context, func([]byte) error) error { return nil }
func (nopCut) Release(bool)                                     {}
func (nopSource) Cut(context.Context) (streaming.Cut, error)    { return nopCut{}, nil }
func (nopSource) Restore(context.Context, string, []byte, iter.Seq2[[]byte, error]) error {
	return nil
}

type nopSource struct{}

// TestLocalCheckpointIsDueOnlyWithoutRounds pins when a local checkpoint
// is due: after max age without a round, not during an open breaker's
// cool-down, and with the coordinator's max age once a round said it.
func TestLocalCheckpointIsDueOnlyWithoutRounds(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := NewShards(WithShardsClock(func() time.Time { return now }))
	store := memory.New()
	cp, err := streaming.NewCheckpointer("iot/a", nopSource{}, store, store)
	require.NoError(t, err)
	r.Register("iot", "a", cp)
	r.view("iot").LastRoundAt = now
	ctx := context.Background()
	local := func() int64 { return r.Coordinator("iot").LocalCheckpoints }

	now = now.Add(29 * time.Second)
	r.localOnce(ctx, "iot", 30*time.Second)
	require.Zero(t, local(), "not due before max age")
	now = now.Add(time.Second)
	r.localOnce(ctx, "iot", 30*time.Second)
	require.Equal(t, int64(1), local())
	r.localOnce(ctx, "iot", 30*time.Second)
	require.Equal(t, int64(1), local(), "the next one is due max age later")

	require.NoError(t, r.Notice(ctx, CoordinatorNotice{Pipeline: "iot", Breaker: "open", Until: now.Add(time.Hour)}))
	require.Equal(t, streaming.BreakerOpen, cp.Status().Breaker)
	now = now.Add(time.Minute)
	r.localOnce(ctx, "iot", 30*time.Second)
	require.Equal(t, int64(1), local(), "an open breaker's pause is not an outage")

	now = now.Add(time.Hour)
	_, err = r.CheckpointRound(ctx, RoundInput{Pipeline: "iot", Round: 3, WorkerID: "w", Breaker: "closed", MaxCheckpointAge: Duration(10 * time.Minute),
		Shards: []ShardEpoch{{Shard: "a"}}})
	require.NoError(t, err)
	require.Equal(t, streaming.BreakerClosed, cp.Status().Breaker)
	now = now.Add(5 * time.Minute)
	r.localOnce(ctx, "iot", 30*time.Second)
	require.Equal(t, int64(1), local(), "the coordinator's max age wins over the worker's default")
	now = now.Add(5 * time.Minute)
	r.localOnce(ctx, "iot", 30*time.Second)
	require.Equal(t, int64(2), local())
}

// TestRoundWithTheBreakerNotOpenEndsTheCoolDown: a probe round run early
// (a checkpoint-now request during the cool-down) can close the breaker
// before the cool-down a notice gave ends. The worker kept that end, so
// it skipped local checkpoints (and re-announced no shard) until then,
// with the breaker closed. A round saying the breaker is not open ends
// the pause.
func TestRoundWithTheBreakerNotOpenEndsTheCoolDown(t *testing.T) {
	for _, state := range []string{"closed", "half-open"} {
		t.Run(state, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			r := NewShards(WithShardsClock(func() time.Time { return now }))
			ctx := context.Background()
			require.NoError(t, r.Notice(ctx, CoordinatorNotice{Pipeline: "iot", Breaker: "open", Until: now.Add(time.Hour)}))
			_, err := r.CheckpointRound(ctx, RoundInput{Pipeline: "iot", Round: 3, WorkerID: "w", Breaker: "open"})
			require.NoError(t, err)
			require.Equal(t, now.Add(time.Hour), r.Coordinator("iot").PausedUntil, "a round of an open breaker keeps the pause")

			now = now.Add(time.Minute)
			_, err = r.CheckpointRound(ctx, RoundInput{Pipeline: "iot", Round: 4, WorkerID: "w", Breaker: state})
			require.NoError(t, err)
			require.Zero(t, r.Coordinator("iot").PausedUntil)

			store := memory.New()
			cp, err := streaming.NewCheckpointer("iot/a", nopSource{}, store, store)
			require.NoError(t, err)
			r.Register("iot", "a", cp)
			now = now.Add(30 * time.Second)
			r.localOnce(ctx, "iot", 30*time.Second)
			require.Equal(t, int64(1), r.Coordinator("iot").LocalCheckpoints, "a local checkpoint is due again before the old cool-down's end")
		})
	}
}
