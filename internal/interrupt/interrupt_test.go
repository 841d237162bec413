package interrupt_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/interrupt"
)

// The first signal cancels, the second calls again; stop ends the watch,
// so a signal after it calls nothing.
func TestSecondSignalCallsAgain(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	again := make(chan struct{}, 1)
	ctx, stop := interrupt.Context(context.Background(), sigs, func() { again <- struct{}{} })
	defer stop()
	sigs <- os.Interrupt
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first signal did not cancel the context")
	}
	require.Empty(t, again, "the first signal only cancels")
	sigs <- os.Interrupt
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("the second signal was ignored")
	}
}

func TestStopEndsTheWatch(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	sigs := make(chan os.Signal, 2)
	ctx, stop := interrupt.Context(parent, sigs, func() { t.Error("again called after stop") })
	stop()
	stop() // twice is fine
	require.Error(t, ctx.Err(), "stop cancels the context")
	sigs <- os.Interrupt
	sigs <- os.Interrupt
	// Nothing reads sigs any more: both stay buffered.
	require.Eventually(t, func() bool { return len(sigs) == 2 }, 10*time.Second, time.Millisecond)
}
