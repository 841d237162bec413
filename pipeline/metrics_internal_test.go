package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// TestBreakerSeries: a breaker is one series per state, 1 for the current
// one (state="open" 1 while open), instead of one gauge coding the state
// as 0, 1 or 2.
func TestBreakerSeries(t *testing.T) {
	d := prometheus.NewDesc("b", "b", []string{"shard", "state"}, nil)
	for _, cur := range breakerStates {
		ch := make(chan prometheus.Metric, len(breakerStates))
		breakerSeries(ch, d, cur, "s0")
		close(ch)
		got := map[string]float64{}
		for m := range ch {
			var pb dto.Metric
			require.NoError(t, m.Write(&pb))
			labels := map[string]string{}
			for _, l := range pb.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, "s0", labels["shard"])
			got[labels["state"]] = pb.GetGauge().GetValue()
		}
		want := map[string]float64{"closed": 0, "half-open": 0, "open": 0}
		want[cur.String()] = 1
		require.Equal(t, want, got, "breaker %s", cur)
	}
	require.Equal(t, []streaming.BreakerState{streaming.BreakerClosed, streaming.BreakerHalfOpen, streaming.BreakerOpen}, breakerStates)
}

// TestReleasedShardLeavesTheCheckpointSeries: a shard's
// tflo_pipeline_checkpoints_total and checkpoint_duration_seconds series
// stayed after the worker released it (frozen, for every shard that ever
// passed through the worker), where the other per-shard series are the
// held shards' alone; releasing the shard deletes them.
func TestReleasedShardLeavesTheCheckpointSeries(t *testing.T) {
	ctx := context.Background()
	w, reg := meteredWorker(ctx, t, 1)
	k := gainPartition(ctx, t, w, 0)
	id := k.id
	require.NoError(t, k.apply(ctx, []*kgo.Record{{Topic: "readings", Offset: 0, Value: []byte(`{"sensor":"a","ts":1,"value":1}`)}}))
	_, err := k.cp.Checkpoint(ctx)
	require.NoError(t, err)
	series := func() map[string][]string { // by metric, the shards of its series
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string][]string{}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "tflo_pipeline_checkpoints_total", "tflo_pipeline_checkpoint_duration_seconds", "tflo_pipeline_checkpoint_age_seconds":
			default:
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "shard" {
						out[mf.GetName()] = append(out[mf.GetName()], l.GetValue())
					}
				}
			}
		}
		return out
	}
	held := []string{string(id)}
	require.Equal(t, map[string][]string{"tflo_pipeline_checkpoints_total": held, "tflo_pipeline_checkpoint_duration_seconds": held,
		"tflo_pipeline_checkpoint_age_seconds": held}, series())
	require.NoError(t, k.Release(ctx, true))
	require.Empty(t, series(), "series of the released shard")
}

// TestEventLagFollowsTheHeldShards: tflo_pipeline_event_lag_seconds was
// the wall clock minus the newest event time the worker ever applied, so
// a worker whose shards were all released kept reporting a lag that grew
// forever, and a shard gained later with a backlog showed the released
// shard's fresh events instead of its own; the gauge follows the shards
// held now, and is 0 while none is.
func TestEventLagFollowsTheHeldShards(t *testing.T) {
	ctx := context.Background()
	w, reg := meteredWorker(ctx, t, 2)
	lag := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "tflo_pipeline_event_lag_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no tflo_pipeline_event_lag_seconds")
		return 0
	}
	reading := func(ts time.Time) *kgo.Record {
		return &kgo.Record{Topic: "readings", Offset: 0, Value: fmt.Appendf(nil, `{"sensor":"a","ts":%d,"value":1}`, ts.UnixMilli())}
	}
	require.Zero(t, lag(), "before the first record")

	k0 := gainPartition(ctx, t, w, 0)
	require.NoError(t, k0.apply(ctx, []*kgo.Record{reading(time.Now())}))
	require.Less(t, lag(), 60.0, "a fresh record")
	require.NoError(t, k0.Release(ctx, true))
	require.Zero(t, lag(), "no shard held")

	k1 := gainPartition(ctx, t, w, 1)
	require.NoError(t, k1.apply(ctx, []*kgo.Record{reading(time.Now().Add(-time.Hour))}))
	require.Greater(t, lag(), 3500.0, "the backlog of the shard held now")
	require.NoError(t, k1.Release(ctx, true))
}

// TestStateSeriesCountValueLogGCErrors: keyedstate.Stats.ValueLogGCErrors
// (value-log GCs that failed after a write-behind batch: the shard
// carries on) was no metric, so nothing showed a state database whose
// garbage was not collected. It is
// tflo_pipeline_state_value_log_gc_errors_total, per held shard.
func TestStateSeriesCountValueLogGCErrors(t *testing.T) {
	ctx := context.Background()
	w, reg := meteredWorker(ctx, t, 1)
	k := gainPartition(ctx, t, w, 0)
	gcErrors := func() map[string]float64 { // by shard
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "tflo_pipeline_state_value_log_gc_errors_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "shard" {
						out[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}
	require.Equal(t, map[string]float64{string(k.id): 0}, gcErrors(), "the held shard's series")

	// A runtime's failed GCs, as its Stats count them.
	ch := make(chan prometheus.Metric, 16)
	stateSeries(ch, nil, "s0", keyedstate.Stats{ValueLogGCErrors: 3})
	close(ch)
	var got []float64
	for m := range ch {
		if strings.Contains(m.Desc().String(), `fqName: "tflo_pipeline_state_value_log_gc_errors_total"`) {
			var pb dto.Metric
			require.NoError(t, m.Write(&pb))
			got = append(got, pb.GetCounter().GetValue())
		}
	}
	require.Equal(t, []float64{3}, got)
}

// TestValueLogGCErrorsAreLogged: a failed value-log GC was counted
// (tflo_pipeline_state_value_log_gc_errors_total) but its error was never
// logged, so nothing said why. A grown count is logged with the shard,
// how many failed and the last error (naming the state's prefix), once
// per growth, and sampled.
func TestValueLogGCErrorsAreLogged(t *testing.T) {
	var buf logtest.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	lim := lograte.New()
	var logged atomic.Uint64
	gcErr := fmt.Errorf(`keyedstate: runtime of prefix %q: %w`, "s/readings/0/", errors.New("disk says no"))
	logValueLogGCErrors(log, lim, "readings/0", &logged, keyedstate.Stats{})
	require.Empty(t, buf.String(), "no GC failed")
	logValueLogGCErrors(log, lim, "readings/0", &logged, keyedstate.Stats{ValueLogGCErrors: 2, ValueLogGCError: gcErr})
	line := buf.String()
	require.Contains(t, line, `msg="state value-log GC failed; the shard carries on and the next GC retries"`)
	require.Contains(t, line, "shard=readings/0 failed=2 failed_total=2")
	require.Contains(t, line, `err="keyedstate: runtime of prefix \"s/readings/0/\": disk says no"`)
	logValueLogGCErrors(log, lim, "readings/0", &logged, keyedstate.Stats{ValueLogGCErrors: 2, ValueLogGCError: gcErr})
	require.Equal(t, line, buf.String(), "a count that did not grow is not logged again")
	logValueLogGCErrors(log, lim, "readings/0", &logged, keyedstate.Stats{ValueLogGCErrors: 3, ValueLogGCError: gcErr})
	require.Contains(t, strings.TrimPrefix(buf.String(), line), "failed=1 failed_total=3")

	// Sampled: a GC failing at every checkpoint of many shards.
	c := logtest.NewCounter("state value-log GC failed; the shard carries on and the next GC retries")
	lim, start := lograte.New(), time.Now()
	const n = 100
	for i := range n {
		var logged atomic.Uint64
		logValueLogGCErrors(c.Logger(), lim, streaming.ShardID(fmt.Sprintf("readings/%d", i)), &logged, keyedstate.Stats{ValueLogGCErrors: 1, ValueLogGCError: gcErr})
	}
	c.RequireSampled(t, n, time.Since(start))
}

// meteredWorker is a worker "w1" of smaPipeline(t, window) whose
// metrics go to the registry returned, closed at the test's end.
func meteredWorker(ctx context.Context, t *testing.T, window int) (*Worker, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	w, err := NewWorker(ctx, smaPipeline(t, window), WithWorkerID("w1"), WithMetrics(reg))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w, reg
}
