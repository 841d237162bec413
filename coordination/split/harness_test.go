package split_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/streaming"
)

// auditStore sits directly on the shared store and checks every progress
// write that lands, in revision order per split (a write's reply may be
// observed after a later write's): the epoch never goes back, one epoch has
// one owner, and the watermark never regresses.
type auditStore struct {
	coordination.Store
	clock coordination.Clock

	mu         sync.Mutex
	history    map[split.SplitID][]landed // sorted by revision
	violations []string
}

type landed struct {
	rev coordination.Revision
	p   split.Progress
	at  time.Time
}

type claimRecord struct {
	Split    split.SplitID
	Owner    split.WorkerID
	Epoch    streaming.Epoch
	Attempts uint32
	At       time.Time
}

func newAudit(s coordination.Store, clk coordination.Clock) *auditStore {
	return &auditStore{Store: s, clock: clk, history: map[split.SplitID][]landed{}}
}

// compatible reports why b cannot follow a (empty when it can).
func compatible(id split.SplitID, a, b split.Progress) string {
	switch {
	case b.Epoch < a.Epoch:
		return fmt.Sprintf("split %s: epoch regressed %d -> %d", id, a.Epoch, b.Epoch)
	case b.Epoch == a.Epoch && a.Status == split.StatusOwned && b.Status == split.StatusOwned && a.Owner != b.Owner:
		return fmt.Sprintf("split %s: epoch %d owned twice (%s and %s)", id, a.Epoch, a.Owner, b.Owner)
	case b.Watermark < a.Watermark:
		return fmt.Sprintf("split %s: watermark regressed %d -> %d", id, a.Watermark, b.Watermark)
	}
	return ""
}

func (a *auditStore) observe(key string, value []byte, out coordination.CasOutcome, err error) {
	if err != nil || !out.Won() || !strings.HasPrefix(key, "prog.") {
		return
	}
	id := split.SplitID(strings.TrimPrefix(key, "prog."))
	var p split.Progress
	if jerr := json.Unmarshal(value, &p); jerr != nil {
		a.fail("split %s: undecodable progress %q", id, value)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.history[id]
	i, _ := slices.BinarySearchFunc(h, out.Revision(), func(l landed, r coordination.Revision) int { return cmp.Compare(l.rev, r) })
	if i > 0 {
		if v := compatible(id, h[i-1].p, p); v != "" {
			a.violations = append(a.violations, v)
		}
	}
	if i < len(h) {
		if v := compatible(id, p, h[i].p); v != "" {
			a.violations = append(a.violations, v)
		}
	}
	a.history[id] = slices.Insert(h, i, landed{out.Revision(), p, a.clock.Now()})
}

func (a *auditStore) fail(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.violations = append(a.violations, fmt.Sprintf(format, args...))
}

func (a *auditStore) Create(ctx context.Context, ks coordination.Keyspace, key string, value []byte) (coordination.CasOutcome, error) {
	out, err := a.Store.Create(ctx, ks, key, value)
	if ks == coordination.Durable {
		a.observe(key, value, out, err)
	}
	return out, err
}

func (a *auditStore) Update(ctx context.Context, ks coordination.Keyspace, key string, value []byte, expected coordination.Revision) (coordination.CasOutcome, error) {
	out, err := a.Store.Update(ctx, ks, key, value, expected)
	if ks == coordination.Durable {
		a.observe(key, value, out, err)
	}
	return out, err
}

func (a *auditStore) Violations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.violations...)
}

// Claims lists every ownership change: an Owned write at a higher epoch
// than the write before it.
func (a *auditStore) Claims() []claimRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []claimRecord
	for id, h := range a.history {
		for i := 1; i < len(h); i++ {
			if p := h[i].p; p.Status == split.StatusOwned && p.Epoch > h[i-1].p.Epoch {
				out = append(out, claimRecord{id, p.Owner, p.Epoch, p.Attempts, h[i].at})
			}
		}
	}
	return out
}

// Last is the progress record at the highest revision seen.
func (a *auditStore) Last(id split.SplitID) split.Progress {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.history[id]
	if len(h) == 0 {
		return split.Progress{}
	}
	return h[len(h)-1].p
}

// ErrCut is what a worker behind a cut link gets.
var ErrCut = errors.New("link to the store cut (fault injected)")

// faultStore is one worker's link to the shared store: Cut makes every call
// fail and breaks its watches (a crashed, paused or partitioned process);
// Lossy makes its watches drop events silently (the failure only the
// reconcile listing can catch).
type faultStore struct {
	coordination.Store
	cut   atomic.Bool
	lossy atomic.Bool

	mu       sync.Mutex
	watchers []*faultWatcher
}

func (f *faultStore) check(op string, ks coordination.Keyspace, key string) error {
	if f.cut.Load() {
		return coordination.Retryable(op, ks, key, ErrCut)
	}
	return nil
}

func (f *faultStore) Cut(c bool) {
	f.cut.Store(c)
	if c {
		f.mu.Lock()
		for _, w := range f.watchers {
			w.breakNow()
		}
		f.watchers = nil
		f.mu.Unlock()
	}
}

func (f *faultStore) Create(ctx context.Context, ks coordination.Keyspace, key string, v []byte) (coordination.CasOutcome, error) {
	if err := f.check("create", ks, key); err != nil {
		return coordination.Lost, err
	}
	return f.Store.Create(ctx, ks, key, v)
}

func (f *faultStore) Update(ctx context.Context, ks coordination.Keyspace, key string, v []byte, rev coordination.Revision) (coordination.CasOutcome, error) {
	if err := f.check("update", ks, key); err != nil {
		return coordination.Lost, err
	}
	return f.Store.Update(ctx, ks, key, v, rev)
}

func (f *faultStore) Get(ctx context.Context, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	if err := f.check("get", ks, key); err != nil {
		return coordination.Entry{}, err
	}
	return f.Store.Get(ctx, ks, key)
}

func (f *faultStore) Delete(ctx context.Context, ks coordination.Keyspace, key string, rev coordination.Revision) (coordination.CasOutcome, error) {
	if err := f.check("delete", ks, key); err != nil {
		return coordination.Lost, err
	}
	return f.Store.Delete(ctx, ks, key, rev)
}

func (f *faultStore) List(ctx context.Context, ks coordination.Keyspace, prefix string) ([]coordination.Entry, error) {
	if err := f.check("list", ks, prefix); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, ks, prefix)
}

func (f *faultStore) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	if err := f.check("watch", ks, prefix); err != nil {
		return nil, err
	}
	inner, err := f.Store.Watch(ctx, ks, prefix)
	if err != nil {
		return nil, err
	}
	w := &faultWatcher{inner: inner, f: f, out: make(chan coordination.WatchEvent), stop: make(chan struct{}), done: make(chan struct{})}
	f.mu.Lock()
	f.watchers = append(f.watchers, w)
	f.mu.Unlock()
	go w.run()
	return w, nil
}

type faultWatcher struct {
	inner    coordination.Watcher
	f        *faultStore
	out      chan coordination.WatchEvent
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	err      error
	broken   atomic.Bool
}

func (w *faultWatcher) breakNow() {
	w.broken.Store(true)
	w.stopOnce.Do(func() { close(w.stop) })
}

func (w *faultWatcher) run() {
	defer close(w.done)
	defer close(w.out)
	for {
		select {
		case <-w.stop:
			_ = w.inner.Close()
			if w.broken.Load() {
				w.err = coordination.Retryable("watch", 0, "", ErrCut)
			}
			return
		case ev, ok := <-w.inner.Events():
			if !ok {
				w.err = w.inner.Err()
				return
			}
			if w.f.lossy.Load() {
				continue
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				_ = w.inner.Close()
				if w.broken.Load() {
					w.err = coordination.Retryable("watch", 0, "", ErrCut)
				}
				return
			}
		}
	}
}

func (w *faultWatcher) Events() <-chan coordination.WatchEvent { return w.out }
func (w *faultWatcher) Err() error                             { return w.err }
func (w *faultWatcher) Close() error {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

// processed is the application's log: which worker processed which record
// of which split at which epoch.
type processed struct {
	Worker split.WorkerID
	Epoch  streaming.Epoch
	Offset uint64
}

// app is a fake source: every recordEvery it processes the split's next
// record, committing every commitEvery records and the tail on revocation.
type app struct {
	clock       coordination.Clock
	recordEvery time.Duration
	commitEvery uint64

	mu      sync.Mutex
	log     map[split.SplitID][]processed
	resumed map[split.SplitID][]uint64 // watermark each tenancy resumed after
	fenced  atomic.Int64
}

func newApp(clk coordination.Clock, every time.Duration) *app {
	return &app{clock: clk, recordEvery: every, commitEvery: 3, log: map[split.SplitID][]processed{}, resumed: map[split.SplitID][]uint64{}}
}

func (a *app) handler(worker split.WorkerID) split.Handler {
	return func(ctx context.Context, t *split.Tenancy) error {
		id := t.Spec().ID
		done := t.Resume().Watermark
		a.mu.Lock()
		a.resumed[id] = append(a.resumed[id], done)
		a.mu.Unlock()
		committed := done
		timer := a.clock.NewTimer(a.recordEvery)
		defer timer.Stop()
		commit := func() error {
			if committed == done {
				return nil
			}
			err := t.Commit(ctx, done, []byte(fmt.Sprintf("state@%d", done)))
			if errors.Is(err, split.ErrFenced) {
				a.fenced.Add(1)
				return err
			}
			if err == nil {
				committed = done
			}
			return nil // a store error: keep going, commit later
		}
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.Revoking():
				if err := commit(); err != nil {
					return err
				}
				return nil
			case <-timer.C():
				done++
				a.mu.Lock()
				a.log[id] = append(a.log[id], processed{worker, t.Epoch(), done})
				a.mu.Unlock()
				if done-committed >= a.commitEvery {
					if err := commit(); err != nil {
						return err
					}
				}
				timer.Reset(a.recordEvery)
			}
		}
	}
}

// duplicates lists records processed more than once.
func (a *app) duplicates() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id, recs := range a.log {
		seen := map[uint64]processed{}
		for _, r := range recs {
			if p, ok := seen[r.Offset]; ok {
				out = append(out, fmt.Sprintf("%s offset %d by %s@%d and %s@%d", id, r.Offset, p.Worker, p.Epoch, r.Worker, r.Epoch))
			}
			seen[r.Offset] = r
		}
	}
	return out
}

// lastProcessedExcept is the highest record of id processed by any worker
// other than w (the previous owners' tail, when w is the new owner).
func (a *app) lastProcessedExcept(id split.SplitID, w split.WorkerID) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last uint64
	for _, r := range a.log[id] {
		if r.Worker != w {
			last = max(last, r.Offset)
		}
	}
	return last
}

func (a *app) resumes(id split.SplitID) []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]uint64(nil), a.resumed[id]...)
}

func counter(m *split.Metrics, worker split.WorkerID, reason string) float64 {
	return testutil.ToFloat64(m.Losses.WithLabelValues(string(worker), reason))
}

func requireNoViolations(t *testing.T, a *auditStore) {
	t.Helper()
	require.Empty(t, a.Violations(), "protocol invariants violated")
}

var lossReasons = []string{split.LossReleased, split.LossFailed, split.LossSelfFence, split.LossLeaseLost,
	split.LossFenced, split.LossRevoked, split.LossForced, split.LossShutdown, split.LossDuplicated}

// losses snapshots every loss counter, to assert on what changed later.
func losses(m *split.Metrics, ids ...split.WorkerID) map[string]float64 {
	out := map[string]float64{}
	for _, id := range ids {
		for _, r := range lossReasons {
			out[string(id)+"/"+r] = counter(m, id, r)
		}
	}
	return out
}

// doubleOwned reads every worker's held set twice, forwards then backwards,
// and reports a split as owned twice only when both passes show it under
// two workers: a handoff between two sequential reads (the old owner read
// before it released, the new one after it claimed) shows in one pass only,
// a real double ownership in both.
func doubleOwned(ids []split.WorkerID, held func(i int) []split.SplitID) string {
	n := len(ids)
	fwd := make([][]split.SplitID, n)
	for i := 0; i < n; i++ {
		fwd[i] = held(i)
	}
	bwd := make([][]split.SplitID, n)
	for i := n - 1; i >= 0; i-- {
		bwd[i] = held(i)
	}
	a, b := overlap(ids, fwd), overlap(ids, bwd)
	if a != "" && a == b {
		return a
	}
	return ""
}

// overlap names the first split held by two workers.
func overlap(ids []split.WorkerID, sets [][]split.SplitID) string {
	owner := map[split.SplitID]split.WorkerID{}
	for i, set := range sets {
		for _, s := range set {
			if o, dup := owner[s]; dup {
				return fmt.Sprintf("split %s owned twice: by %s and %s", s, o, ids[i])
			}
			owner[s] = ids[i]
		}
	}
	return ""
}

// runW1 starts worker w1 on store, on virtual clock clk, with handler h
// and opts, running until ctx ends; Run's result arrives on the channel.
func runW1(t *testing.T, ctx context.Context, store coordination.Store, clk *vclock.Clock, h split.Handler, opts ...split.Option) (*split.Worker, <-chan error) {
	t.Helper()
	w, err := split.NewWorker(store, "w1", append([]split.Option{split.WithClock(clk), split.WithHandler(h)}, opts...)...)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return w, done
}

// untilRevoked is a handler that keeps its split until it is revoked or
// the worker stops.
func untilRevoked(ctx context.Context, ten *split.Tenancy) error {
	select {
	case <-ten.Revoking():
	case <-ctx.Done():
	}
	return nil
}

// untilStopped is a handler that keeps its split until the worker stops.
func untilStopped(ctx context.Context, _ *split.Tenancy) error {
	<-ctx.Done()
	return nil
}
