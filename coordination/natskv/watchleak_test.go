package natskv_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/natskv"
)

// kvCallbacks counts goroutines inside nats.go's KV watch callback.
func kvCallbacks() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "jetstream.(*kvs).WatchFiltered.func") {
			n++
		}
	}
	return n
}

// TestClosedWatchLeavesNoBlockedDelivery: nats.go's KV watcher hands
// updates to a channel of 256 from the subscription's delivery goroutine,
// blocking when it is full. A watch closed (or broken) with more than that
// still undelivered stopped reading the channel, so the delivery goroutine
// stayed blocked for good, with the subscription's buffered messages: one
// leaked goroutine per such watch, and a worker re-watches after every
// broken stream. Ending a watch now drains the channel until nats.go
// closes it.
func TestClosedWatchLeavesNoBlockedDelivery(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := natskv.Open(ctx, js, "leak", natskv.WithLeaseTTL(time.Second), natskv.WithStorage(jetstream.MemoryStorage))
	require.NoError(t, err)
	const keys = 600 // well above nats.go's 256-update channel
	for i := range keys {
		_, err := s.Create(ctx, coordination.Durable, fmt.Sprintf("k%04d", i), []byte("v"))
		require.NoError(t, err)
	}
	before := kvCallbacks()
	w, err := s.Watch(ctx, coordination.Durable, "")
	require.NoError(t, err)
	select {
	case <-w.Events(): // the snapshot is flowing
	case <-ctx.Done():
		t.Fatal("no snapshot event")
	}
	require.Eventually(t, func() bool { return kvCallbacks() > before }, 10*time.Second, time.Millisecond,
		"nats.go's delivery blocks on its full update channel")
	require.NoError(t, w.Close())
	require.Eventually(t, func() bool { return kvCallbacks() <= before }, 10*time.Second, 5*time.Millisecond,
		"a closed watch left nats.go's delivery goroutine blocked on its update channel")
}
