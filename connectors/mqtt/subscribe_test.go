package mqtt

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// notifyHandler is a slog.Handler that closes ch at the first record
// whose message starts with prefix.
type notifyHandler struct {
	prefix string
	once   *sync.Once
	ch     chan struct{}
}

func (h notifyHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h notifyHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h notifyHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h notifyHandler) WithGroup(string) slog.Handler      { return h }

// lateSuback holds the first SUBSCRIBE until release is closed, then
// lets the broker subscribe the client to a filter nothing is published
// on: a SUBACK that comes after the client stopped waiting for it, for a
// subscription the client did not ask for.
type lateSuback struct {
	mochi.HookBase
	once    sync.Once
	release chan struct{}
}

func (h *lateSuback) ID() string           { return "late-suback" }
func (h *lateSuback) Provides(b byte) bool { return b == mochi.OnSubscribe }
func (h *lateSuback) OnSubscribe(_ *mochi.Client, pk packets.Packet) packets.Packet {
	first := false
	h.once.Do(func() { first = true })
	if !first {
		return pk
	}
	<-h.release
	pk.Filters = append(packets.Subscriptions(nil), pk.Filters...)
	for i := range pk.Filters {
		pk.Filters[i].Filter = "elsewhere/" + pk.Filters[i].Filter
	}
	return pk
}

// TestSubscribeRetriedAfterSubackTimeout: a SUBACK that does not come
// within the packet timeout (a broker slow to answer, as when every
// gateway reconnects at once) on a connection that stays up is retried
// with backoff: the source subscribes and receives, instead of staying
// on the connection unsubscribed until it happens to drop.
func TestSubscribeRetriedAfterSubackTimeout(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	hook := &lateSuback{release: make(chan struct{})}
	require.NoError(t, b.srv.AddHook(hook, nil))
	failed := make(chan struct{})
	log := slog.New(notifyHandler{prefix: "mqtt subscribe failed", once: new(sync.Once), ch: failed})
	s := newTestSource(t, b, "edge-late-suback", WithConnectTimeout(time.Second), WithLogger(log))
	var rec recorder
	runSource(t, s, rec.handle)
	select {
	case <-failed:
	case <-time.After(waitFor):
		t.Fatal("the first SUBSCRIBE never timed out")
	}
	close(hook.release)

	waitSubscribed(t, s, 1)
	require.Equal(t, uint64(1), s.Stats().Connects, "the connection stayed up")
	require.NoError(t, b.srv.Publish("sensors/a", reading("a", 1, 1), false, 2))
	require.Eventually(t, func() bool { return rec.len() == 1 }, waitFor, time.Millisecond)
}

// noSharedSubs announces in its CONNACKs that the broker supports no
// shared subscriptions (Shared Subscription Available = 0).
type noSharedSubs struct{ mochi.HookBase }

func (h *noSharedSubs) ID() string           { return "no-shared-subs" }
func (h *noSharedSubs) Provides(b byte) bool { return b == mochi.OnPacketEncode }
func (h *noSharedSubs) OnPacketEncode(_ *mochi.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Connack {
		pk.Properties.SharedSubAvailable, pk.Properties.SharedSubAvailableFlag = 0, true
	}
	return pk
}

// TestSubscribeTheBrokerCannotTakeStopsRun: a broker announcing in its
// CONNACK that it supports no shared subscriptions gets none: paho
// refuses the SUBSCRIBE before sending it (ErrInvalidArguments), which
// the source took for a SUBACK that did not come and retried for ever,
// subscribed to nothing. It is the configuration error a refusing SUBACK
// is: Run stops with an error naming the filter.
func TestSubscribeTheBrokerCannotTakeStopsRun(t *testing.T) {
	b := startBroker(t, mqttbroker.Options{})
	require.NoError(t, b.srv.AddHook(new(noSharedSubs), nil))
	s := newTestSource(t, b, "edge-no-share", WithSharedGroup("g"))
	r := runSource(t, s, func(context.Context, Message) error { return nil })
	var err error
	select {
	case err = <-r.done:
		close(r.done)
	case <-time.After(waitFor):
		t.Fatalf("Run kept retrying a subscription the broker does not support; stats %+v", s.Stats())
	}
	require.ErrorContains(t, err, `mqtt source "edge-no-share": subscribe "$share/g/sensors/#":`)
	require.ErrorContains(t, err, "server does not support shared subscriptions")
	require.Zero(t, s.Stats().Subscribes)
}
