package split_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/coordination/vclock"
)

const (
	ttl  = 3 * time.Second
	step = 100 * time.Millisecond
)

// cluster is N workers on one memory store and one virtual clock.
type cluster struct {
	t       testing.TB
	clk     *vclock.Clock
	mem     *memstore.Store
	audit   *auditStore
	app     *app
	metrics *split.Metrics
	splits  []split.Spec

	mu    sync.Mutex
	nodes map[split.WorkerID]*node
	gated int
}

type node struct {
	id      split.WorkerID
	w       *split.Worker
	link    *faultStore
	clock   *vclock.Clock // the worker's own clock (shared unless paused)
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returned; err is then set
	err     error
	started time.Time
	dead    bool // crashed: its local state means nothing any more
	paused  bool // its clock stands still and its link is cut
}

func newCluster(t testing.TB, nSplits int) *cluster {
	clk, mem := split.NewVirtualMem(t, ttl)
	c := &cluster{
		t: t, clk: clk, mem: mem, audit: newAudit(mem, clk), app: newApp(clk, 2*step),
		metrics: split.NewMetrics(nil), nodes: map[split.WorkerID]*node{},
	}
	for i := range nSplits {
		c.splits = append(c.splits, split.Spec{ID: split.SplitID(fmt.Sprintf("s%03d", i)), Weight: 1, Descriptor: []byte(fmt.Sprintf("partition-%d", i))})
	}
	require.NoError(t, split.AddSplits(context.Background(), c.audit, c.splits...))
	t.Cleanup(c.stopAll)
	return c
}

func (c *cluster) start(id split.WorkerID, opts ...split.Option) *node {
	return c.startWith(id, c.clk, opts...)
}

func (c *cluster) startWith(id split.WorkerID, clk *vclock.Clock, opts ...split.Option) *node {
	c.t.Helper()
	link := &faultStore{Store: c.audit}
	logger := slog.New(slog.NewTextHandler(testLog{c.t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, bench := c.t.(*testing.B); bench {
		logger = slog.New(slog.DiscardHandler) // logging would dominate the measurement
	}
	base := []split.Option{split.WithClock(clk), split.WithHandler(c.app.handler(id)), split.WithMetrics(c.metrics), split.WithLogger(logger)}
	w, err := split.NewWorker(link, id, append(base, opts...)...)
	require.NoError(c.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{id: id, w: w, link: link, clock: clk, cancel: cancel, done: make(chan struct{}), started: clk.Now()}
	go func() { n.err = w.Run(ctx); close(n.done) }()
	c.mu.Lock()
	c.nodes[id+split.WorkerID("#"+w.Instance())] = n
	c.mu.Unlock()
	return n
}

func (c *cluster) live() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node
	for _, n := range c.nodes {
		if !n.dead && !n.paused {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *node) int { return compareStr(string(a.id), string(b.id)) })
	return out
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// crash kills a node without a goodbye: its link is cut first, so the
// graceful shutdown that follows cannot write anything.
func (c *cluster) crash(n *node) {
	c.mu.Lock()
	n.dead = true
	c.mu.Unlock()
	n.link.Cut(true)
	n.cancel()
}

// tick advances virtual time by one step, unless a live worker is behind
// on its renewals or still draining a revoked split (then it lets real time
// pass so goroutines catch up; virtual time must never outrun them).
func (c *cluster) tick() {
	for _, n := range c.live() {
		last := n.w.LastRenewal()
		if !last.IsZero() && n.clock.Now().Sub(last) > ttl/3+2*step {
			return
		}
		if n.w.Draining() > 0 {
			c.mu.Lock()
			c.gated++
			g := c.gated
			c.mu.Unlock()
			if g%50 != 0 {
				return
			}
		}
	}
	c.clk.Advance(step)
	c.mu.Lock()
	var own []*vclock.Clock
	for _, n := range c.nodes {
		if n.clock != c.clk && !n.paused {
			own = append(own, n.clock)
		}
	}
	c.mu.Unlock()
	for _, clk := range own {
		clk.Advance(step)
	}
}

// checkInvariants: live workers hold disjoint splits; the audit saw no
// epoch, owner or watermark violation. Returns the first problem.
func (c *cluster) checkInvariants() string {
	live := c.live()
	ids := make([]split.WorkerID, len(live))
	for i, n := range live {
		ids[i] = n.id
	}
	if v := doubleOwned(ids, func(i int) []split.SplitID { return live[i].w.Held() }); v != "" {
		return v
	}
	if v := c.audit.Violations(); len(v) > 0 {
		return v[0]
	}
	return ""
}

// until advances virtual time until cond holds, checking the invariants at
// every step; fails after a real-time deadline.
func (c *cluster) until(what string, cond func() bool) {
	c.t.Helper()
	var broken string
	ok := assert.Eventually(c.t, func() bool {
		if broken = c.checkInvariants(); broken != "" {
			return true
		}
		if cond() {
			return true
		}
		c.tick()
		return false
	}, 90*time.Second, time.Millisecond, "waiting for: %s", what)
	if !ok {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		c.t.Log(string(buf))
		c.t.Log(c.dump())
		c.t.FailNow()
	}
	require.Empty(c.t, broken, "invariant broken while waiting for: %s", what)
}

// runFor advances d of virtual time, checking invariants throughout.
func (c *cluster) runFor(d time.Duration) {
	c.t.Helper()
	end := c.clk.Now().Add(d)
	c.until(fmt.Sprintf("virtual time to pass %v", d), func() bool { return !c.clk.Now().Before(end) })
}

// holdings maps each live worker to its held splits.
func (c *cluster) holdings() map[split.WorkerID][]split.SplitID {
	out := map[split.WorkerID][]split.SplitID{}
	for _, n := range c.live() {
		out[n.id] = n.w.Held()
	}
	return out
}

// balanced: every split held by exactly one of the live workers, loads
// within one of each other, and the plan agrees with the holdings.
func (c *cluster) balanced() bool {
	live := c.live()
	if len(live) == 0 {
		return false
	}
	held := map[split.SplitID]split.WorkerID{}
	lo, hi := len(c.splits), 0
	for _, n := range live {
		h := n.w.Held()
		lo, hi = min(lo, len(h)), max(hi, len(h))
		for _, id := range h {
			held[id] = n.id
		}
	}
	if len(held) != len(c.splits) || hi-lo > 1 {
		return false
	}
	v, err := split.Inspect(context.Background(), c.mem)
	if err != nil || v.Plan == nil {
		return false
	}
	return maps.Equal(v.Plan.Assign, held)
}

func (c *cluster) leader() *node {
	for _, n := range c.live() {
		if n.w.IsLeader() {
			return n
		}
	}
	return nil
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	nodes := slices.Collect(maps.Values(c.nodes))
	c.mu.Unlock()
	for _, n := range nodes {
		n.link.Cut(false)
		n.paused = false
		n.cancel()
	}
	for _, n := range nodes {
		deadline := time.Now().Add(30 * time.Second)
	wait:
		for {
			if time.Now().After(deadline) {
				c.t.Errorf("worker %s did not stop", n.id)
				break
			}
			c.clk.Advance(step)
			n.clock.Advance(step)
			select { // wait on the worker's exit, advancing time while it drains
			case <-n.done:
				break wait
			case <-time.After(time.Millisecond):
			}
		}
	}
}

var _ coordination.Store = (*faultStore)(nil)

// dump describes the cluster for a failure message.
func (c *cluster) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "virtual now %v\n", c.clk.Now())
	c.mu.Lock()
	for k, n := range c.nodes {
		fmt.Fprintf(&b, "node %s dead=%v paused=%v leader=%v lastRenew=%v held=%v draining=%d\n",
			k, n.dead, n.paused, n.w.IsLeader(), n.w.LastRenewal(), n.w.Held(), n.w.Draining())
	}
	c.mu.Unlock()
	v, err := split.Inspect(context.Background(), c.mem)
	fmt.Fprintf(&b, "inspect err=%v leader=%+v\n", err, v.Leader)
	if v.Plan != nil {
		fmt.Fprintf(&b, "plan gen=%d leader=%s assign=%v\n", v.Plan.Generation, v.Plan.Leader, v.Plan.Assign)
	}
	fmt.Fprintf(&b, "workers=%v\nleases=%v\n", v.Workers, v.Leases)
	for id, p := range v.Progress {
		fmt.Fprintf(&b, "prog %s: epoch=%d status=%s owner=%s attempts=%d wm=%d\n", id, p.Epoch, p.Status, p.Owner, p.Attempts, p.Watermark)
	}
	return b.String()
}

// testLog sends worker logs to the test log (shown on failure or -v).
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
