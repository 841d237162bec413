package lograte_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/lograte"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// The first burst lines of an interval go through, the rest are counted,
// and the count rides on the first line of a later interval.
func TestBurstPerInterval(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := lograte.NewWith(3, 10*time.Second, c.now)
	var passed int
	for range 10 {
		ok, suppressed := l.Allow()
		if ok {
			passed++
			require.Zero(t, suppressed, "nothing was left out before the first three")
		}
	}
	require.Equal(t, 3, passed)

	c.t = c.t.Add(9 * time.Second)
	ok, _ := l.Allow()
	require.False(t, ok, "still the first interval")

	c.t = c.t.Add(time.Second)
	ok, suppressed := l.Allow()
	require.True(t, ok, "a new interval")
	require.Equal(t, 8, suppressed, "seven left out of the first ten, one more at 9s")
	ok, suppressed = l.Allow()
	require.True(t, ok)
	require.Zero(t, suppressed, "reported once")
}

func TestBurstAtLeastOne(t *testing.T) {
	l := lograte.NewWith(0, time.Hour, time.Now)
	ok, _ := l.Allow()
	require.True(t, ok)
	ok, _ = l.Allow()
	require.False(t, ok)
}

// Concurrent callers share one budget: exactly burst lines go through.
func TestConcurrentCallersShareTheBurst(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := lograte.NewWith(5, time.Minute, c.now)
	var mu sync.Mutex
	passed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow(); ok {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, 5, passed)
}
