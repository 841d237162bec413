package split_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/metered"
	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/streaming"
)

// natsCluster runs workers on real time against an in-process nats-server,
// each worker with its own connection (so a crash is a closed connection).
type natsCluster struct {
	t      *testing.T
	srv    *server.Server
	audit  *auditStore
	app    *app
	m      *split.Metrics
	storeM *metered.Metrics
	splits []split.Spec
	nodes  map[split.WorkerID]*natsNode
	order  []split.WorkerID
}

type natsNode struct {
	w      *split.Worker
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	dead   bool
}

// natsTTL is the lease on real time: long enough that a loaded 2-core CI
// machine does not starve a renewal for a whole lease.
const natsTTL = 3 * time.Second

func openNATS(t *testing.T, srv *server.Server) (*nats.Conn, coordination.Store) {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := natskv.Open(ctx, js, "scenario", natskv.WithLeaseTTL(natsTTL), natskv.WithStorage(jetstream.MemoryStorage))
	require.NoError(t, err)
	return nc, s
}

func newNATSCluster(t *testing.T, nSplits int) *natsCluster {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(srv.Shutdown)
	nc, s := openNATS(t, srv)
	t.Cleanup(nc.Close)
	c := &natsCluster{t: t, srv: srv, audit: newAudit(s, coordination.SystemClock{}), app: newApp(coordination.SystemClock{}, 20*time.Millisecond),
		m: split.NewMetrics(nil), storeM: metered.NewMetrics(nil), nodes: map[split.WorkerID]*natsNode{}}
	for i := range nSplits {
		c.splits = append(c.splits, split.Spec{ID: split.SplitID(fmt.Sprintf("s%02d", i)), Weight: 1})
	}
	require.NoError(t, split.AddSplits(context.Background(), c.audit, c.splits...))
	t.Cleanup(c.stop)
	return c
}

func (c *natsCluster) start(id split.WorkerID) *natsNode {
	nc, s := openNATS(c.t, c.srv)
	// Each worker writes through its own connection; the audit sees every
	// progress write that lands because all of them go through it.
	w, err := split.NewWorker(&auditTap{Store: s, audit: c.audit}, id, split.WithHandler(c.app.handler(id)), split.WithMetrics(c.m), split.WithStoreMetrics(c.storeM))
	require.NoError(c.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	n := &natsNode{w: w, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() { _ = w.Run(ctx); close(n.done) }()
	c.nodes[id] = n
	c.order = append(c.order, id)
	return n
}

// auditTap routes one worker's writes through the shared audit.
type auditTap struct {
	coordination.Store
	audit *auditStore
}

func (a *auditTap) Create(ctx context.Context, ks coordination.Keyspace, key string, v []byte) (coordination.CasOutcome, error) {
	out, err := a.Store.Create(ctx, ks, key, v)
	if ks == coordination.Durable {
		a.audit.observe(key, v, out, err)
	}
	return out, err
}

func (a *auditTap) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	out, err := a.Store.Update(ctx, ks, key, v, rev)
	if ks == coordination.Durable {
		a.audit.observe(key, v, out, err)
	}
	return out, err
}

func (c *natsCluster) crash(id split.WorkerID) {
	n := c.nodes[id]
	n.dead = true
	n.nc.Close() // no goodbye can be written
	n.cancel()
}

func (c *natsCluster) stop() {
	for _, n := range c.nodes {
		n.cancel()
	}
	for id, n := range c.nodes {
		select {
		case <-n.done:
		case <-time.After(20 * time.Second):
			c.t.Errorf("worker %s did not stop", id)
		}
		n.nc.Close()
	}
}

func (c *natsCluster) check() string {
	var ids []split.WorkerID
	for _, id := range c.order {
		if !c.nodes[id].dead {
			ids = append(ids, id)
		}
	}
	if v := doubleOwned(ids, func(i int) []split.SplitID { return c.nodes[ids[i]].w.Held() }); v != "" {
		return v
	}
	if v := c.audit.Violations(); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c *natsCluster) balanced() bool {
	held := map[split.SplitID]split.WorkerID{}
	lo, hi := len(c.splits), 0
	for _, id := range c.order {
		n := c.nodes[id]
		if n.dead {
			continue
		}
		h := n.w.Held()
		lo, hi = min(lo, len(h)), max(hi, len(h))
		for _, s := range h {
			held[s] = id
		}
	}
	if len(held) != len(c.splits) || hi-lo > 1 {
		return false
	}
	v, err := split.Inspect(context.Background(), c.audit)
	return err == nil && v.Plan != nil && maps.Equal(v.Plan.Assign, held)
}

func (c *natsCluster) until(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	var broken string
	require.Eventually(c.t, func() bool {
		if broken = c.check(); broken != "" {
			return true
		}
		return cond()
	}, d, 5*time.Millisecond, "waiting for: %s", what)
	require.Empty(c.t, broken, "invariant broken while waiting for: %s", what)
}

func TestNATSScenarioBalancedAndHeld(t *testing.T) {
	c := newNATSCluster(t, 8)
	c.start("w1")
	c.start("w2")
	c.until("two workers balanced", 60*time.Second, c.balanced)
	before := map[split.WorkerID][]split.SplitID{"w1": c.nodes["w1"].w.Held(), "w2": c.nodes["w2"].w.Held()}
	lost := losses(c.m, "w1", "w2")
	deadline := time.Now().Add(3 * natsTTL)
	c.until("three leases of steady state", 60*time.Second, func() bool { return time.Now().After(deadline) })
	for id, held := range before {
		require.Equal(t, held, c.nodes[id].w.Held(), "%s's splits moved in steady state", id)
	}
	require.Equal(t, lost, losses(c.m, "w1", "w2"), "no split lost, for any reason, in steady state")
	require.Empty(t, c.app.duplicates())
	require.Positive(t, testutil.CollectAndCount(c.storeM.Duration()), "store op durations were metered")
	require.Positive(t, testutil.ToFloat64(c.m.Acquisitions.WithLabelValues("w1")))
}

func TestNATSScenarioCrashReclaimed(t *testing.T) {
	c := newNATSCluster(t, 6)
	c.start("w1")
	c.start("w2")
	c.start("w3")
	c.until("three workers balanced", 60*time.Second, c.balanced)
	lost := c.nodes["w2"].w.Held()
	require.NotEmpty(t, lost)
	epochs := map[split.SplitID]streaming.Epoch{}
	for _, s := range lost {
		epochs[s] = c.audit.Last(s).Epoch
	}
	crashed := time.Now()
	c.crash("w2")
	c.until("w2's splits re-claimed by the others", 60*time.Second, c.balanced)
	for _, cl := range c.audit.Claims() {
		if slices.Contains(lost, cl.Split) && cl.Epoch == epochs[cl.Split]+1 {
			require.Equal(t, uint32(1), cl.Attempts, "one attempt consumed for %s", cl.Split)
			require.NotEqual(t, split.WorkerID("w2"), cl.Owner)
			require.False(t, cl.At.Before(crashed), "claimed before the crash?")
		}
	}
	for _, s := range lost {
		require.Equal(t, epochs[s]+1, c.audit.Last(s).Epoch)
	}
}

func TestNATSScenarioJoinMovesCooperatively(t *testing.T) {
	c := newNATSCluster(t, 6)
	c.start("w1")
	c.start("w2")
	c.until("two workers balanced", 60*time.Second, c.balanced)
	lost := losses(c.m, "w1", "w2")
	c.start("w3")
	c.until("three workers balanced", 60*time.Second, func() bool { return c.balanced() && len(c.nodes["w3"].w.Held()) == 2 })
	var graceful float64
	for _, id := range []split.WorkerID{"w1", "w2"} {
		graceful += counter(c.m, id, split.LossRevoked) - lost[string(id)+"/"+split.LossRevoked]
		require.Equal(t, lost[string(id)+"/"+split.LossForced], counter(c.m, id, split.LossForced))
		require.Equal(t, lost[string(id)+"/"+split.LossSelfFence], counter(c.m, id, split.LossSelfFence))
	}
	require.Equal(t, float64(2), graceful, "w3 took two splits, each by a graceful revocation")
	for _, s := range c.nodes["w3"].w.Held() {
		tn, ok := c.nodes["w3"].w.Tenancy(s)
		require.True(t, ok)
		require.Equal(t, c.app.lastProcessedExcept(s, "w3"), tn.Resume().Watermark, "%s arrived with the old owner's committed tail", s)
	}
	require.Empty(t, c.app.duplicates(), "a cooperative move replays nothing")
}
