package ops

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/tflo-io/tflo/streaming"
)

func TestEpisode(t *testing.T) {
	high, low := streaming.Sig(High, 0), streaming.Sig(Low, 0)
	steps := []struct {
		in   streaming.Computed
		ts   int64
		want streaming.Computed
	}{
		{low, 1, none},
		{high, 2, streaming.Sig(EpisodeOpened, 0)},
		{high, 5, none},
		{f(30), 6, streaming.Sig(EpisodeClosed, 4)}, // a plain value has mode 0: closes
		{none, 7, none},
		{low, 9, none},
		{streaming.Sig(Up, 1), 20, streaming.Sig(EpisodeOpened, 0)}, // a cross's Up opens too
		{streaming.Sig(Down, 1), 21, streaming.Sig(EpisodeClosed, 1)},
	}
	e := NewEpisode()
	for i, s := range steps {
		if got := e.Eval([]streaming.Computed{s.in}, s.ts); got != s.want {
			t.Fatalf("step %d: got %v, want %v", i, got, s.want)
		}
	}
	if e.Closed() != 2 {
		t.Fatalf("Closed() = %d, want 2", e.Closed())
	}
}

// An episode longer than 2^63 event-time units closes with its (positive)
// duration. Bug: ts − openedAt overflowed int64 and the duration came out
// negative.
func TestEpisodeLongerThan2To63Units(t *testing.T) {
	e := NewEpisode()
	e.Eval([]streaming.Computed{streaming.Sig(High, 0)}, math.MinInt64/2)
	got := e.Eval([]streaming.Computed{streaming.Sig(Low, 0)}, math.MaxInt64/2+2)
	if want := streaming.Sig(EpisodeClosed, float64(uint64(1)<<63)); got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A restored Episode continues like the uninterrupted one; a bad blob is
// refused and changes nothing.
func TestEpisodeSaveLoad(t *testing.T) {
	a := NewEpisode()
	a.Eval([]streaming.Computed{streaming.Sig(High, 0)}, 100)
	blob, err := a.Save()
	if err != nil {
		t.Fatal(err)
	}
	b := NewEpisode()
	if err := b.Load(blob); err != nil {
		t.Fatal(err)
	}
	if got := b.Eval([]streaming.Computed{streaming.Sig(Low, 0)}, 150); got != streaming.Sig(EpisodeClosed, 50) {
		t.Fatalf("after Load: got %v, want closed after 50", got)
	}
	for _, bad := range [][]byte{nil, make([]byte, 16), append([]byte{2}, make([]byte, 16)...)} {
		c := &Episode{open: true, openedAt: 7}
		err := c.Load(bad)
		var le *streaming.OperatorLoadError
		if !errors.As(err, &le) || !errors.Is(err, streaming.ErrCorrupt) {
			t.Fatalf("blob %x: got %v, want an OperatorLoadError wrapping ErrCorrupt", bad, err)
		}
		if *c != (Episode{open: true, openedAt: 7}) {
			t.Fatalf("blob %x: a refused Load changed the state", bad)
		}
	}
}

func FuzzEpisodeLoad(f *testing.F) {
	e := NewEpisode()
	e.Eval([]streaming.Computed{streaming.Sig(High, 0)}, 3)
	blob, _ := e.Save()
	f.Add(blob)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e := NewEpisode()
		if err := e.Load(b); err != nil {
			return
		}
		again, err := e.Save()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("load/save of %x gave %x, %v", b, again, err)
		}
	})
}

// TestEpisodeCloseBeforeOpenLastsZero: a close whose event time is before
// the episode's open (an out-of-order record) closes the episode with
// duration 0, and the next episode is timed normally. Bug: the duration
// came out negative (-4 here), subtracting from any sum of alarm time.
func TestEpisodeCloseBeforeOpenLastsZero(t *testing.T) {
	e := NewEpisode()
	high, low := []streaming.Computed{streaming.Sig(High, 0)}, []streaming.Computed{streaming.Sig(Low, 0)}
	if got := e.Eval(high, 10); got != streaming.Sig(EpisodeOpened, 0) {
		t.Fatalf("open: got %v", got)
	}
	if got := e.Eval(low, 6); got != streaming.Sig(EpisodeClosed, 0) {
		t.Fatalf("close at 6 of the episode opened at 10: got %v, want a close lasting 0", got)
	}
	if e.Closed() != 1 {
		t.Fatalf("Closed() = %d, want 1", e.Closed())
	}
	e.Eval(high, 12)
	if got := e.Eval(low, 15); got != streaming.Sig(EpisodeClosed, 3) {
		t.Fatalf("next episode 12..15: got %v, want a close lasting 3", got)
	}
	// The most negative difference event times allow.
	e.Eval(high, math.MaxInt64)
	if got := e.Eval(low, math.MinInt64); got != streaming.Sig(EpisodeClosed, 0) {
		t.Fatalf("close at MinInt64 of an episode opened at MaxInt64: got %v", got)
	}
}
