package vclock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination/vclock"
)

func TestTimersFireInDeadlineOrderAtTheirTime(t *testing.T) {
	start := time.Unix(0, 0)
	c := vclock.New(start)
	var mu sync.Mutex
	var fired []time.Duration
	done := make(chan struct{}, 3)
	for _, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		c.AfterFunc(d, func() {
			mu.Lock()
			fired = append(fired, c.Now().Sub(start))
			mu.Unlock()
			done <- struct{}{}
		})
	}
	tm := c.NewTimer(1500 * time.Millisecond)
	c.Advance(time.Second)
	<-done
	select {
	case <-tm.C():
		t.Fatal("timer fired early")
	default:
	}
	c.Advance(5 * time.Second)
	<-done
	<-done
	require.Equal(t, start.Add(1500*time.Millisecond), <-tm.C())
	require.Equal(t, start.Add(6*time.Second), c.Now())
	require.False(t, tm.Stop(), "a fired timer is not armed")
	require.Len(t, fired, 3)
}

func TestStopAndReset(t *testing.T) {
	c := vclock.New(time.Unix(0, 0))
	var n atomic.Int32
	tm := c.AfterFunc(time.Second, func() { n.Add(1) })
	require.True(t, tm.Stop())
	c.Advance(2 * time.Second)
	require.Zero(t, c.Pending())
	require.False(t, tm.Reset(time.Second))
	require.Equal(t, 1, c.Pending())
	late := c.NewTimer(time.Hour)
	late.ResetAt(c.Now().Add(-time.Second))
	select {
	case <-late.C():
	default:
		t.Fatal("ResetAt a past deadline must fire immediately")
	}
	ch := c.NewTimer(0) // fires at once
	select {
	case <-ch.C():
	default:
		t.Fatal("a zero timer must fire immediately")
	}
}

// TestRearmingLoop is the renewal-loop pattern: a goroutine waits on a
// timer, works, and re-arms at an absolute deadline anchored at when it was
// woken, while another goroutine advances time only when the loop has kept
// up. (With Reset(deadline.Sub(Now())) the deadline drifts late whenever
// time advances between the two calls, and the driver waits forever.)
func TestRearmingLoop(t *testing.T) {
	c := vclock.New(time.Unix(0, 0))
	const period = time.Second
	var last atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tm := c.NewTimer(period)
		tm.ResetAt(time.Unix(0, 0).Add(period)) // anchored at the start, however late this goroutine runs
		defer tm.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tm.C():
			}
			sent := c.Now()
			last.Store(sent.UnixNano())
			tm.ResetAt(sent.Add(period))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for c.Now().Before(time.Unix(600, 0)) {
		require.True(t, time.Now().Before(deadline), "loop stalled at %v (last round %v)", c.Now(), time.Unix(0, last.Load()))
		if c.Now().Sub(time.Unix(0, last.Load())) > period+200*time.Millisecond {
			select { // let the loop catch up
			case <-time.After(50 * time.Microsecond):
			case <-stop:
			}
			continue
		}
		c.Advance(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// TestStopAndResetDropAnUnreceivedFire: as with time.Timer (Go 1.23 on),
// no receive after Stop or Reset returns gets the fire time of before
// it, and Stop of a timer whose fire was not received reports true. Bug:
// the fire time stayed in the channel, so a Reset timer was received at
// once with its old time, unlike on the wall clock the code runs on.
func TestStopAndResetDropAnUnreceivedFire(t *testing.T) {
	start := time.Unix(0, 0)
	c := vclock.New(start)
	tm := c.NewTimer(time.Second)
	c.Advance(time.Second)
	require.True(t, tm.Reset(2*time.Second), "Reset drops the unreceived fire: the timer was still pending")
	select {
	case v := <-tm.C():
		t.Fatalf("received %v right after Reset, before the new deadline", v)
	default:
	}
	c.Advance(2 * time.Second)
	require.Equal(t, start.Add(3*time.Second), <-tm.C())

	c.Advance(0)
	tm.Reset(time.Second)
	c.Advance(time.Second)
	require.True(t, tm.Stop(), "Stop drops the unreceived fire")
	select {
	case v := <-tm.C():
		t.Fatalf("received %v after Stop", v)
	default:
	}
	require.False(t, tm.Stop(), "stopped already")

	// ResetAt a passed deadline fires at once, with the current time
	// only: the fire at 6s, not received, is dropped.
	c.Advance(time.Second)
	tm.Reset(time.Second)
	c.Advance(2 * time.Second)
	tm.ResetAt(start)
	require.Equal(t, start.Add(7*time.Second), <-tm.C())
	select {
	case v := <-tm.C():
		t.Fatalf("a second value %v", v)
	default:
	}
}
