package portal

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/testsuite/toolbin"
	"github.com/tflo-io/tflo/workers/simulator"
)

// TestStartStackReportsAWorkerFailingAtStart: the edge gateway stops with
// an error before it subscribed (here a live twin holds its worker id in
// the coordination store, so it cannot register). StartStack must fail as
// soon as it does, with the edge's own error naming it. Bug: the start-up
// waited out its 30 s and reported only "edge gateway subscribed: not
// within 30s", dropping the worker's error.
func TestStartStackReportsAWorkerFailingAtStart(t *testing.T) {
	toolbin.RequireStack(t)
	twinCtx, stopTwin := context.WithCancel(context.Background())
	var twinWG sync.WaitGroup
	t.Cleanup(func() { stopTwin(); twinWG.Wait() })
	beforeEdge = func(s *Stack) error {
		const key = "worker.edge-1" // split's presence key of the worker id
		twin, err := json.Marshal(split.Presence{Worker: "edge-1", Instance: "twin"})
		if err != nil {
			return err
		}
		out, err := s.Coordination.Create(twinCtx, coordination.Ephemeral, key, twin)
		if err != nil {
			return err
		}
		rev := out.Revision()
		twinWG.Go(func() { // a live twin: renews its presence, as split's renewals do
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-twinCtx.Done():
					return
				case <-tick.C:
				}
				if out, err := s.Coordination.Update(twinCtx, coordination.Ephemeral, key, twin, rev); err == nil && out.Won() {
					rev = out.Revision()
				}
			}
		})
		return nil
	}
	t.Cleanup(func() { beforeEdge = nil })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Headless: true, LocalArchive: true, CentralWorkers: 1})
	if st != nil {
		_ = st.Close()
	}
	require.Error(t, err)
	require.NotContains(t, err.Error(), "not within", "the start-up waited out its deadline")
	require.Contains(t, err.Error(), `worker "edge-1"`)
	require.Contains(t, err.Error(), "twin")
	t.Logf("failed after %v: %v", time.Since(start), err)
}

// seededFleet is a bounded fleet publishing as fast as the broker takes
// it, which raises and clears alarms (signals).
var seededFleet = simulator.Config{Sensors: 8, Rounds: 250, Start: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	AnomalyEvery: 40, AnomalyLength: 10, Malformed: 0.03, Seed: 42}

// startTestStack starts a headless stack with a local archive and one
// central worker, changed by opts; it is closed when the test ends.
func startTestStack(t *testing.T, ctx context.Context, opts func(*StackOptions)) *Stack {
	t.Helper()
	toolbin.RequireStack(t)
	o := StackOptions{Dir: t.TempDir(), Headless: true, LocalArchive: true, CentralWorkers: 1}
	if opts != nil {
		opts(&o)
	}
	st, err := StartStack(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// centralRecordsIn sums the central workers' applied records, replays
// included.
func centralRecordsIn(st *Stack) uint64 {
	var n uint64
	for _, w := range st.Centrals {
		n += w.Stats().RecordsIn
	}
	return n
}

// TestStatsCountAReplayedSignalOnce: the central worker loses its
// partitions (the broker answers its heartbeats with ILLEGAL_GENERATION, as
// after a session timeout), rejoins, gains them again and replays every
// signal from its last checkpoint (none: the interval is an hour). Bug:
// CentralIn summed the records the workers applied, so each replayed
// signal counted twice: the demo's summary showed twice the signals the
// edge published, and a negative lag.
func TestStatsCountAReplayedSignalOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := startTestStack(t, ctx, func(o *StackOptions) {
		o.Simulator = seededFleet
		o.CheckpointInterval = time.Hour
	})
	select {
	case <-st.SimulatorDone():
	case <-ctx.Done():
		t.Fatal("simulator did not finish")
	}
	require.NoError(t, st.SimulatorErr())
	sim := st.Simulator.Stats()
	require.Eventually(t, func() bool {
		s := st.Stats()
		return s.EdgeReadings+s.EdgeDLQ == uint64(sim.Readings+sim.Malformed) && s.Lag == 0
	}, time.Minute, 20*time.Millisecond, "the edge and the central worker did not take everything: %+v", st.Stats())
	signals := st.Stats().EdgeSignals
	require.NotZero(t, signals)

	// Every heartbeat fails until the worker rejoins (control functions
	// run one at a time).
	c := st.Kafka.Cluster()
	lost := true
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		lost = false
		return nil, nil, false // handled by the broker as usual
	})
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !lost {
			return nil, nil, false
		}
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.IllegalGeneration.Code
		return resp, nil, true
	})
	require.Eventually(t, func() bool { return centralRecordsIn(st) >= 2*signals }, time.Minute, 20*time.Millisecond,
		"the central worker did not replay its signals: applied %d, signals %d", centralRecordsIn(st), signals)
	// The edge may yet publish a signal it applied (its sink's
	// acknowledgement comes later): compare with what it published then.
	require.Eventually(t, func() bool { s := st.Stats(); return s.CentralIn == s.EdgeSignals && s.Lag == 0 }, 10*time.Second, 20*time.Millisecond,
		"a replayed signal counted again: %+v", st.Stats())
}

// TestStopWaitsForTheEdgeToTakeWhatWasPublished: the broker holds its
// deliveries to the edge gateway (a slow link) while the simulator goes
// on publishing, and the stack stops. Bug: StopWorkers stopped the edge
// right after the simulator, so payloads the broker had acknowledged to
// the simulator but not yet delivered were never taken: the demo's
// summary showed fewer edge readings and dead letters than the simulator
// published. The deliveries resume once the stop says it waits for them
// (or once the edge stopped: the bug).
func TestStopWaitsForTheEdgeToTakeWhatWasPublished(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fleet := seededFleet
	fleet.Rounds = 0 // until stopped
	waiting := &logWatch{want: "waiting for the edge gateway", seen: make(chan struct{})}
	hold := &holdDeliveries{client: "edge-1", release: make(chan struct{})}
	st := startTestStack(t, ctx, func(o *StackOptions) {
		o.Simulator = fleet
		o.Log = slog.New(slog.NewTextHandler(waiting, nil))
		o.BeforeSimulator = func(s *Stack) error { return s.MQTT.Server().AddHook(hold, nil) }
	})
	t.Cleanup(hold.open) // before the stack closes, should the test fail first
	published := func(s StackStats) uint64 { return uint64(s.Simulator.Readings + s.Simulator.Malformed) }
	taken := func(s StackStats) uint64 { return s.EdgeReadings + s.EdgeDLQ }
	require.Eventually(t, func() bool { return st.Stats().Simulator.Readings >= 100 }, time.Minute, time.Millisecond)
	hold.held.Store(true)
	require.Eventually(t, func() bool { s := st.Stats(); return published(s) >= taken(s)+20 }, time.Minute, time.Millisecond,
		"the simulator did not get ahead of the held edge: %+v", st.Stats())
	go func() {
		select {
		case <-waiting.seen:
		case <-st.Edge.Done():
		}
		hold.open()
	}()
	require.NoError(t, st.StopWorkers())
	s := st.Stats()
	require.Equal(t, published(s), taken(s), "published (readings + malformed) vs taken by the edge (readings + dead letters): %+v", s)
}

// holdDeliveries is a broker hook that, once held, holds every publish
// to the client until open.
type holdDeliveries struct {
	mochi.HookBase
	client  string
	held    atomic.Bool
	release chan struct{}
	once    sync.Once
}

func (h *holdDeliveries) open() { h.once.Do(func() { close(h.release) }) }

func (h *holdDeliveries) ID() string { return "hold-deliveries" }

func (h *holdDeliveries) Provides(b byte) bool { return b == mochi.OnPacketEncode }

func (h *holdDeliveries) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if h.held.Load() && cl.ID == h.client && pk.FixedHeader.Type == packets.Publish {
		<-h.release
	}
	return pk
}

// logWatch is a log destination that closes seen at the first line
// holding want.
type logWatch struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *logWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}
