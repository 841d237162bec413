package central

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
)

func TestEpisode(t *testing.T) {
	high := streaming.Sig(ops.High, 0)
	low := streaming.Sig(ops.Low, 0)
	steps := []struct {
		in   streaming.Computed
		ts   int64
		want streaming.Computed
	}{
		{low, 1, streaming.NoOutput()},
		{high, 2, streaming.Sig(EpisodeOpened, 0)},
		{high, 5, streaming.NoOutput()},
		{streaming.None(), 6, streaming.NoOutput()},
		{low, 9, streaming.Sig(EpisodeClosed, 7)}, // 9 - 2
		{low, 10, streaming.NoOutput()},
		{high, 20, streaming.Sig(EpisodeOpened, 0)},
		{low, 21, streaming.Sig(EpisodeClosed, 1)},
	}
	var e Episode
	for i, s := range steps {
		got := e.Eval([]streaming.Computed{s.in}, s.ts)
		require.Equal(t, s.want, got, "step %d", i)
	}
	require.Equal(t, uint64(2), e.Closed())
}

// A restored Episode continues exactly like the uninterrupted one.
func TestEpisodeSaveLoad(t *testing.T) {
	var a Episode
	a.Eval([]streaming.Computed{streaming.Sig(ops.High, 0)}, 100)
	blob, err := a.Save()
	require.NoError(t, err)
	var b Episode
	require.NoError(t, b.Load(blob))
	require.Equal(t, a, b)
	require.Equal(t, streaming.Sig(EpisodeClosed, 50), b.Eval([]streaming.Computed{streaming.Sig(ops.Low, 0)}, 150))

	for _, bad := range [][]byte{nil, make([]byte, 16), append([]byte{2}, make([]byte, 16)...)} {
		c := Episode{open: true, openedAt: 7}
		err := c.Load(bad)
		var le *streaming.OperatorLoadError
		require.True(t, errors.As(err, &le), "blob %x: %v", bad, err)
		require.ErrorIs(t, err, streaming.ErrCorrupt)
		require.Equal(t, Episode{open: true, openedAt: 7}, c, "a refused blob changed the state")
	}
}

func FuzzEpisodeLoad(f *testing.F) {
	var e Episode
	e.Eval([]streaming.Computed{streaming.Sig(ops.High, 0)}, 3)
	blob, _ := e.Save()
	f.Add(blob)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Episode
		if err := e.Load(b); err != nil {
			return
		}
		again, err := e.Save()
		if err != nil || string(again) != string(b) {
			t.Fatalf("load/save of %x gave %x, %v", b, again, err)
		}
	})
}

// The graph's outputs through a whole instance: rolling stats and one
// alarm episode opened and closed by the rolling mean.
func TestGraphOutputs(t *testing.T) {
	g, err := Graph(GraphConfig{Window: 2, AlarmLow: 20, AlarmHigh: 25})
	require.NoError(t, err)
	require.Equal(t, graphOutputs, g.Outputs())
	in := g.NewInstance()
	type row struct{ mean, min, max, ep streaming.Computed }
	vals := []float64{10, 30, 30, 10, 10}
	want := []row{
		{streaming.None(), streaming.None(), streaming.None(), streaming.None()},                         // warm-up
		{streaming.Float(20), streaming.Float(10), streaming.Float(30), streaming.None()},                // mean 20: Low
		{streaming.Float(30), streaming.Float(30), streaming.Float(30), streaming.Sig(EpisodeOpened, 0)}, // mean 30: High at ts 3
		{streaming.Float(20), streaming.Float(10), streaming.Float(30), streaming.Sig(EpisodeClosed, 1)}, // mean 20: Low at ts 4
		{streaming.Float(10), streaming.Float(10), streaming.Float(10), streaming.None()},
	}
	for i, v := range vals {
		in.Eval(int64(i+1), streaming.Float(v))
		got := row{in.Output(0), in.Output(1), in.Output(2), in.Output(3)}
		require.Equal(t, want[i], got, "record %d (value %v)", i, v)
	}
	_, err = Graph(GraphConfig{Window: 2, AlarmLow: 5, AlarmHigh: 1})
	require.Error(t, err, "inverted thresholds must fail at build time")
}
