package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/testsuite/coordtest"
)

func TestConformance(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		clk := vclock.New(time.Unix(1_700_000_000, 0))
		s, err := memstore.New(memstore.WithClock(clk), memstore.WithLeaseTTL(10*time.Second))
		require.NoError(t, err)
		return coordtest.Harness{Store: s, Advance: clk.Advance, BreakWatches: s.BreakWatches}
	})
}

func TestConformanceBoundedBacklog(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		clk := vclock.New(time.Unix(1_700_000_000, 0))
		const backlog = 64
		s, err := memstore.New(memstore.WithClock(clk), memstore.WithMaxWatchBacklog(backlog))
		require.NoError(t, err)
		return coordtest.Harness{Store: s, Advance: clk.Advance, BreakWatches: func() { s.SetAvailable(false) }, WatchBacklog: backlog}
	})
}

func TestOptionsValidate(t *testing.T) {
	for name, opt := range map[string]memstore.Option{
		"nil clock":        memstore.WithClock(nil),
		"zero ttl":         memstore.WithLeaseTTL(0),
		"negative backlog": memstore.WithMaxWatchBacklog(-1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := memstore.New(opt)
			require.Error(t, err)
		})
	}
}

// A snapshot larger than the backlog bound is not a backlog: only live
// events the consumer has not read count, and past the bound the watch
// breaks with a Retryable error.
func TestWatchBacklogCountsLiveEventsOnly(t *testing.T) {
	s, err := memstore.New(memstore.WithMaxWatchBacklog(4))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 10 {
		_, err := s.Create(ctx, coordination.Durable, fmt.Sprintf("k%d", i), []byte("v"))
		require.NoError(t, err)
	}
	w, err := s.Watch(ctx, coordination.Durable, "")
	require.NoError(t, err)
	defer w.Close()
	_, err = s.Create(ctx, coordination.Durable, "live0", []byte("v"))
	require.NoError(t, err)
	for range 11 {
		ev := <-w.Events()
		require.NotEqual(t, coordination.EventDelete, ev.Kind)
	}
	require.Equal(t, "live0", (<-w.Events()).Key, "the snapshot and one live event arrive")

	// At most one event is in flight to the consumer and four are queued;
	// ten unread events must break the watch.
	for i := range 10 {
		_, err := s.Create(ctx, coordination.Durable, fmt.Sprintf("burst%d", i), []byte("v"))
		require.NoError(t, err)
	}
	for range w.Events() {
	}
	require.ErrorIs(t, w.Err(), memstore.ErrWatchBroken)
	require.True(t, coordination.IsRetryable(w.Err()))
}
