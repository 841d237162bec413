package memstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
		s, err := memstore.New(memstore.WithClock(clk), memstore.WithMaxWatchBacklog(64))
		require.NoError(t, err)
		return coordtest.Harness{Store: s, Advance: clk.Advance, BreakWatches: func() { s.SetAvailable(false) }}
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
