package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/streaming"
)

// TestOutputSinkCloseRefusesWriterWokenByTheDrain: Close refuses new writes before it drains, so a writer
// blocked on back-pressure gets ErrClosed instead of a false success.
// Before (the bug this guards against):
// a sink Write blocked on the publisher's full buffer while Close drains
// it is woken by the drain, buffers its record and returns nil; Close's
// Flush does not wait for it (a later generation), returns nil and closes
// the client, which fails the record. Both calls reported success; the
// failure only lands in the sticky error nobody reads any more.
func TestOutputSinkCloseRefusesWriterWokenByTheDrain(t *testing.T) {
	c := newCluster(t, 1)
	release1, release2 := make(chan struct{}), make(chan struct{})
	var once1, once2 sync.Once
	defer once1.Do(func() { close(release1) })
	defer once2.Do(func() { close(release2) })
	var produces atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if produces.Add(1) == 1 {
			c.SleepControl(func() { <-release1 })
		} else {
			c.SleepControl(func() { <-release2 })
		}
		return nil, nil, false
	})
	ctx := context.Background()
	pub, err := NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...), PublisherMaxBuffered(1),
		PublisherClientOptions(kgo.ProducerLinger(0)))
	require.NoError(t, err)
	sink := NewOutputSink(pub, JSONOutputs{})
	out := func(i int) []streaming.Output {
		return []streaming.Output{{Key: "s-1", Name: "sma", TS: int64(i), Value: float64(i)}}
	}
	require.NoError(t, sink.Write(ctx, out(1)))
	require.Eventually(t, func() bool { return produces.Load() == 1 }, 10*time.Second, time.Millisecond)

	werr := make(chan error, 1)
	go func() { werr <- sink.Write(ctx, out(2)) }() // blocks: the buffer holds 1
	cerr := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cerr <- sink.Close(cctx)
	}()
	// Release the first produce only once Close stopped accepting: released
	// earlier, the writer's record is buffered before Close began, and
	// Close's Flush rightly waits for it (its produce is held until the end).
	require.Eventually(t, pub.isClosing, 10*time.Second, time.Millisecond)
	once1.Do(func() { close(release1) })
	var wErr, cErr error
	select {
	case wErr = <-werr:
	case <-time.After(30 * time.Second):
		t.Fatal("Write never returned")
	}
	select {
	case cErr = <-cerr:
	case <-time.After(30 * time.Second):
		t.Fatal("Close never returned")
	}
	t.Logf("write: %v, close: %v, produced %d, failed %d", wErr, cErr, pub.Produced(), pub.Failed())
	if wErr == nil && cErr == nil {
		require.Equal(t, uint64(2), pub.Produced(), "Write and Close returned nil, yet %d record(s) failed after Close: %v",
			pub.Failed(), pub.Flush(ctx))
	}
}
