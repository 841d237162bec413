package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
)

// TestIdleGroupMemberIsReady: a worker whose group has more members than
// the topic has partitions gets an empty assignment, and Ready said "no
// partitions assigned yet (joining the group)" for as long as it ran (its
// /readyz never passed, which stalls a rolling deploy); a member given its
// assignment, even an empty one, serves.
func TestIdleGroupMemberIsReady(t *testing.T) {
	c := newCluster(t, 1)
	p := alarmPipeline(c.ListenAddrs(), "")
	a := start(t, p, pipeline.WithWorkerID("plant-1"))
	b := start(t, p, pipeline.WithWorkerID("plant-2"))
	a.waitFor(t, func() bool { return a.w.Stats().Owned+b.w.Stats().Owned == 1 }, 30*time.Second, "one of the two members owns the partition")
	var errA, errB error
	deadline := time.Now().Add(30 * time.Second)
	for {
		if errA, errB = a.ready(), b.ready(); errA == nil && errB == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "both members ready: plant-1: %v; plant-2: %v", errA, errB)
		time.Sleep(20 * time.Millisecond) // polling Ready, as a probe does
	}
}

// TestNotReadyAfterALostGroupSession: a worker whose group session is lost
// (the coordinator no longer knows the member) releases its partitions
// and rejoins; until the group gives it an assignment again it serves
// nothing. Ready said ready all that time: the source's Assigned stayed
// true from the first assignment, and 0 of 0 owned partitions were
// restored. It says it is rejoining now, and is ready again once the
// group has assigned it.
func TestNotReadyAfterALostGroupSession(t *testing.T) {
	c := newCluster(t, 2)
	r := start(t, alarmPipeline(c.ListenAddrs(), ""), pipeline.WithWorkerID("plant-1"))
	ready := r.ready
	r.waitFor(t, func() bool { return ready() == nil && r.w.Stats().Owned == 2 }, 30*time.Second, "the worker is ready, owning both partitions")

	// The coordinator forgets the member (its heartbeats are refused as
	// from an unknown member) and refuses joins until the test lets them.
	var blocked atomic.Bool
	blocked.Store(true)
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !blocked.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !blocked.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil, true
	})
	r.waitFor(t, func() bool { return r.w.Stats().Owned == 0 }, 30*time.Second, "the lost session released the partitions")
	err := ready()
	require.Error(t, err, "a member rejoining its group serves nothing")
	require.Contains(t, err.Error(), "kafka source")
	blocked.Store(false)
	r.waitFor(t, func() bool { return ready() == nil && r.w.Stats().Owned == 2 }, 30*time.Second, "ready again after the rejoin")
}

// TestNotReadyWhileTheDeadLetterSinkIsDown: Ready asked the output sinks
// whether their servers answer, not the dead-letter sink, whose failed
// writes fail the shards' checkpoints just the same: a worker whose
// dead-letter cluster was down said it was ready. It now names the
// dead-letter sink.
func TestNotReadyWhileTheDeadLetterSinkIsDown(t *testing.T) {
	c := newCluster(t, 1)
	dlq := newCluster(t, 1)
	p := alarmPipeline(c.ListenAddrs(), "")
	p.DeadLetter = pipeline.KafkaSink{Brokers: dlq.ListenAddrs(), Topic: topic + ".dlq"}
	r := start(t, p, pipeline.WithWorkerID("plant-1"))
	ready := r.ready
	r.waitFor(t, func() bool { return ready() == nil }, 30*time.Second, "the worker is ready")
	dlq.Close()
	r.waitFor(t, func() bool {
		err := ready()
		return err != nil && strings.Contains(err.Error(), "dead-letter sink: kafka publisher")
	}, 30*time.Second, "the worker is not ready, naming the dead-letter sink")
}

// TestMQTTNotReadyWhileTheBrokerIsDown: Ready asked only whether the MQTT
// source had subscribed once, so a worker whose broker was down (it
// receives nothing) stayed ready for ever. It is not ready while the
// connection is down, naming the source and the broker, and ready again
// once it has reconnected and subscribed.
func TestMQTTNotReadyWhileTheBrokerIsDown(t *testing.T) {
	e := newEdgeEnv(t)
	r := e.start(t, e.pipeline(false, time.Hour))
	ready := r.ready
	r.waitFor(t, func() bool { return ready() == nil }, waitFor, "the worker is ready")

	e.stopBroker()
	want := `mqtt source "edge-gw-1": connection to broker mqtt://` + e.addr + ` down`
	r.waitFor(t, func() bool {
		err := ready()
		return err != nil && strings.Contains(err.Error(), want)
	}, waitFor, "the worker is not ready, naming the source and the broker")

	// The broker again, on the same address.
	mqttbrokertest.Start(t, mqttbroker.Options{Addr: e.addr})
	r.waitFor(t, func() bool { return ready() == nil }, waitFor, "the worker is ready again after the reconnect")
}

// closeGate is a sink whose Close waits until the test lets it go: a
// worker held in its drain, after its source stopped.
type closeGate struct {
	*recorder
	closing chan struct{} // closed when Close is called
	release chan struct{} // closed by the test: Close returns
	once    sync.Once
}

func (g *closeGate) Close(context.Context) error {
	g.once.Do(func() { close(g.closing) })
	<-g.release
	return nil
}

// TestNotReadyWhileStopping: once its stop began, a Kafka worker leaves
// the group and releases every partition, and Ready then found the
// member assigned with every owned partition (none) restored and said it
// was ready for the rest of the drain (the sinks' close, the Temporal
// workers' stop), though it served nothing any more. It says it is
// stopping.
func TestNotReadyWhileStopping(t *testing.T) {
	c := newCluster(t, 2)
	g := &closeGate{recorder: newRecorder(), closing: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}()
	p := alarmPipeline(c.ListenAddrs(), "", pipeline.Use(g))
	r := start(t, p, pipeline.WithWorkerID("plant-1"))
	ready := r.ready
	r.waitFor(t, func() bool { return ready() == nil }, 30*time.Second, "the worker is ready")

	r.cancel()
	select {
	case <-g.closing: // the source stopped: the drain closes the sinks
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's drain did not reach its sinks")
	}
	require.Zero(t, r.w.Stats().Owned, "the stopping worker released its partitions")
	err := ready()
	require.Error(t, err, "a stopping worker is not ready")
	require.Contains(t, err.Error(), "stopping")
	close(g.release)
	r.stop(t)
}
