package split

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/metered"
)

// Worker takes part in the split/lease protocol for one worker id: it
// announces itself, follows the leader's plan, claims, renews, commits,
// releases and revokes splits, and runs for leadership.
//
// Goroutines, all owned by Run: the control loop (Run's own goroutine:
// claims, revocations, leader duties), the renewal loop (its own timer,
// never shared with watches or commands, so a stalled watch or a slow claim
// can never starve renewals), one watch and one reconcile goroutine per
// keyspace mirror, and one handler goroutine per tenancy. Self-fence and
// drain timers are clock AfterFuncs.
type Worker struct {
	store coordination.Store
	id    WorkerID
	cfg   config
	ttl   time.Duration

	durable, ephemeral *mirror
	wake               chan struct{}
	fatal              chan error
	handlers           sync.WaitGroup

	// cache holds decoded records by key and revision; used only by the
	// control loop goroutine.
	cache map[string]decoded

	mu          sync.Mutex
	held        map[SplitID]*Tenancy
	presenceRev coordination.Revision
	lead        *leadership
	lastRenew   time.Time
	presenceAt  time.Time // send time of the last presence write that landed
	running     bool
	registered  chan struct{} // closed once presence is registered
	runErr      error         // why Run ended; set before stopped is closed
	stopped     chan struct{} // closed when Run returns
}

type leadership struct {
	leaderRev coordination.Revision
	planRev   coordination.Revision
	plan      Plan
	since     time.Time
	fence     coordination.Timer
}

// NewWorker returns a worker for id on store; Run starts it.
func NewWorker(store coordination.Store, id WorkerID, opts ...Option) (*Worker, error) {
	if store == nil {
		return nil, errors.New("split: the store must not be nil")
	}
	ttl := store.LeaseTTL()
	cfg := defaultConfig(ttl)
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(id); err != nil {
		return nil, err
	}
	if cfg.metrics == nil {
		cfg.metrics = NewMetrics(nil)
	}
	if cfg.storeMetrics != nil {
		m, err := metered.New(store, metered.WithMetrics(cfg.storeMetrics))
		if err != nil {
			return nil, fmt.Errorf("split: worker %q: %w", id, err)
		}
		store = m
	}
	w := &Worker{
		store: store, id: id, cfg: cfg, ttl: ttl,
		wake:  make(chan struct{}, 1),
		fatal: make(chan error, 1),
		held:  map[SplitID]*Tenancy{},
		cache: map[string]decoded{},

		registered: make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	w.durable = newMirror(store, coordination.Durable, cfg.clock, cfg.retry, cfg.reconcile, w.poke)
	w.ephemeral = newMirror(store, coordination.Ephemeral, cfg.clock, cfg.retry, cfg.reconcile, w.poke)
	return w, nil
}

// ID returns the worker id.
func (w *Worker) ID() WorkerID { return w.id }

// Instance returns this incarnation's instance id.
func (w *Worker) Instance() string { return w.cfg.instance }

// Held returns the ids of the splits this worker currently owns, sorted.
func (w *Worker) Held() []SplitID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.held))
}

// Tenancy returns the current tenancy of id, if held.
func (w *Worker) Tenancy(id SplitID) (*Tenancy, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.held[id]
	return t, ok
}

// Draining counts held splits under revocation whose handler is still
// running.
func (w *Worker) Draining() int {
	n := 0
	for _, t := range w.heldTenancies() {
		select {
		case <-t.revoking:
			select {
			case <-t.handled:
			default:
				n++
			}
		default:
		}
	}
	return n
}

// IsLeader reports whether this worker currently leads.
func (w *Worker) IsLeader() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lead != nil
}

// LastRenewal is the clock time at which the last completed renewal round
// was sent (zero before the first).
func (w *Worker) LastRenewal() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastRenew
}

// Registered is closed once the worker's presence is registered (Run's
// first step; a twin holding the id makes Run fail instead, see Stopped).
func (w *Worker) Registered() <-chan struct{} { return w.registered }

// Stopped is closed when Run has returned; Err then says why.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Err reports on the worker's leases, for a supervisor such as the lease
// activity (it satisfies activities.LeaseKeeper): nil while Run runs and
// the presence lease was renewed within the last TTL. Otherwise an error
// naming the worker: not registered yet; no presence renewal landed for a
// whole TTL (the store is unreachable or slow, so other workers may hold
// its splits; every tenancy renewed no later than the presence has
// self-fenced before Err returns); or Run ended (the ErrDuplicateWorker of
// a twin, or ErrWorkerStopped).
func (w *Worker) Err() error {
	select {
	case <-w.stopped:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.runErr != nil {
			return w.runErr
		}
		return fmt.Errorf("split: worker %q: %w", w.id, ErrWorkerStopped)
	default:
	}
	select {
	case <-w.registered:
	default:
		return fmt.Errorf("split: worker %q: presence not registered yet", w.id)
	}
	w.mu.Lock()
	at := w.presenceAt
	w.mu.Unlock()
	now := w.cfg.clock.Now()
	if age := now.Sub(at); age > w.ttl {
		w.fenceLapsed(now)
		return fmt.Errorf("split: worker %q: %w: the last presence renewal that landed was sent %v ago (lease TTL %v)",
			w.id, ErrLeasesExpired, age.Round(time.Millisecond), w.ttl)
	}
	return nil
}

// fenceLapsed drops, as self-fenced, every tenancy whose fence time has
// passed but whose timer has not run yet (timers run on their own
// goroutines, a moment after the clock passes them). Err calls it before
// it reports expired leases, so a supervisor that reads ErrLeasesExpired
// never sees a tenancy still held past its lease.
func (w *Worker) fenceLapsed(now time.Time) {
	w.mu.Lock()
	var lapsed []*Tenancy
	for _, t := range w.held {
		if !t.fenceAt.After(now) {
			lapsed = append(lapsed, t)
		}
	}
	w.mu.Unlock()
	for _, t := range lapsed {
		w.drop(t, LossSelfFence) // a no-op for one its timer dropped meanwhile
	}
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.ttl)
}

// Run registers the worker, takes part in the protocol until ctx ends, then
// drains and releases every held split (each handler gets the drain
// deadline), withdraws its presence and returns nil. It returns an error
// wrapping ErrDuplicateWorker and coordination.ErrFatal when another live
// instance holds the same worker id, and one wrapping ErrWorkerStopped
// and ctx's error when ctx ends before the presence is registered. Run may
// be called once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("split: worker %q: Run called twice", w.id)
	}
	w.running = true
	w.mu.Unlock()
	var runErr error
	defer func() {
		w.mu.Lock()
		w.runErr = runErr
		w.mu.Unlock()
		close(w.stopped)
	}()

	if runErr = w.register(ctx); runErr != nil {
		return runErr
	}
	close(w.registered)
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range []*mirror{w.durable, w.ephemeral} {
		wg.Go(func() { m.run(bg) })
		wg.Go(func() { m.reconcileLoop(bg) })
	}
	renewCtx, stopRenew := context.WithCancel(bg)
	var renewWG sync.WaitGroup
	renewWG.Go(func() { w.renewLoop(renewCtx) })

	tick := w.cfg.clock.NewTimer(w.cfg.reconcile)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-w.fatal:
			runErr = err
			break loop
		case <-w.wake:
		case <-tick.C():
			tick.Reset(w.cfg.reconcile)
		}
		w.step(ctx)
	}
	tick.Stop()

	if runErr != nil {
		// A twin owns our identity: stop everything without writing.
		for _, t := range w.heldTenancies() {
			w.drop(t, LossDuplicated)
		}
	} else {
		w.shutdown(bg)
	}
	stopRenew()
	renewWG.Wait()
	if runErr == nil {
		// Only now that no renewal is in flight: one landing meanwhile
		// would move the keys past the revisions deleted at, or write the
		// presence back, and the stopped worker would look live a TTL.
		w.withdraw(bg)
	}
	w.handlers.Wait()
	stopBG()
	wg.Wait()
	return runErr
}

func (w *Worker) heldTenancies() []*Tenancy {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Values(w.held))
}

// shutdown revokes every held split, waits for the handlers up to the drain
// deadline and releases what is left (leases are still renewed meanwhile).
func (w *Worker) shutdown(ctx context.Context) {
	ts := w.heldTenancies()
	for _, t := range ts {
		w.revoke(t)
	}
	deadline := w.cfg.clock.NewTimer(w.cfg.drain)
	for _, t := range ts {
		select {
		case <-t.handled:
		case <-deadline.C():
		}
	}
	deadline.Stop()
	for _, t := range w.heldTenancies() {
		c, cancel := w.opCtx(ctx)
		_ = t.release(c, false, LossShutdown)
		cancel()
		w.drop(t, LossShutdown)
	}
}

// withdraw deletes the leader key and the presence; call it once the
// renewal loop has stopped.
func (w *Worker) withdraw(ctx context.Context) {
	w.mu.Lock()
	lead, presenceRev := w.lead, w.presenceRev
	w.lead = nil
	w.mu.Unlock()
	c, cancel := w.opCtx(ctx)
	defer cancel()
	if lead != nil {
		lead.fence.Stop()
		_, _ = w.store.Delete(c, coordination.Ephemeral, leaderKey, lead.leaderRev)
	}
	if presenceRev != 0 {
		_, _ = w.store.Delete(c, coordination.Ephemeral, presenceKey(w.id), presenceRev)
	}
}

// register creates the presence key. A key held by another instance is
// watched for a full lease: if its revision moves, a live twin renews it
// (Fatal); if it expires, its owner was a dead predecessor and we take over.
func (w *Worker) register(ctx context.Context) error {
	me := encode(Presence{Worker: w.id, Instance: w.cfg.instance, Capacity: w.cfg.capacity})
	var watched coordination.Revision
	for {
		c, cancel := w.opCtx(ctx)
		sent := w.cfg.clock.Now()
		out, err := w.store.Create(c, coordination.Ephemeral, presenceKey(w.id), me)
		if err == nil && out.Won() {
			cancel()
			w.mu.Lock()
			w.presenceRev = out.Revision()
			w.lastRenew = sent // the presence write is the first renewal
			w.presenceAt = sent
			w.mu.Unlock()
			return nil
		}
		if err == nil {
			e, gerr := w.store.Get(c, coordination.Ephemeral, presenceKey(w.id))
			switch {
			case errors.Is(gerr, coordination.ErrNotFound):
				cancel()
				continue
			case gerr == nil:
				p, derr := decode[Presence](e.Key, e.Value)
				if derr == nil && p.Instance == w.cfg.instance {
					// Our own earlier attempt landed (its reply was lost).
					cancel()
					w.mu.Lock()
					w.presenceRev = e.Revision
					w.lastRenew = sent
					w.presenceAt = sent
					w.mu.Unlock()
					return nil
				}
				if derr == nil {
					if watched != 0 && e.Revision != watched {
						cancel()
						return duplicateWorker(w.id, p.Instance, w.cfg.instance)
					}
					watched = e.Revision
				}
			}
			err = gerr
		}
		cancel()
		if err != nil && coordination.IsFatal(err) {
			return fmt.Errorf("split: worker %q: registering presence: %w", w.id, err)
		}
		// A failed call backs off by the retry interval (WithRetryInterval);
		// a key held by another instance is polled every third of a lease,
		// the cadence at which a live twin renews it.
		wait := w.ttl / 3
		if err != nil {
			wait = w.cfg.retry
		}
		if !sleep(ctx, w.cfg.clock, wait) {
			// Err reports Run's error: name the worker and say it stopped.
			return fmt.Errorf("split: worker %q: %w before its presence was registered: %w", w.id, ErrWorkerStopped, ctx.Err())
		}
	}
}

// renewLoop rewrites presence, leader key and every lease each TTL/3.
func (w *Worker) renewLoop(ctx context.Context) {
	t := w.cfg.clock.NewTimer(w.ttl)
	t.ResetAt(w.LastRenewal().Add(w.ttl / 3))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		sent := w.cfg.clock.Now()
		w.renew(ctx, sent)
		// Cadence anchored at send times: a slow round does not push the
		// next one later.
		t.ResetAt(sent.Add(w.ttl / 3))
	}
}

func (w *Worker) renew(ctx context.Context, sent time.Time) {
	w.mu.Lock()
	presenceRev, lead := w.presenceRev, w.lead
	var leaderRev coordination.Revision
	if lead != nil {
		leaderRev = lead.leaderRev
	}
	type lease struct {
		t   *Tenancy
		rev coordination.Revision
	}
	leases := make([]lease, 0, len(w.held))
	for _, t := range w.held {
		leases = append(leases, lease{t, t.leaseRev})
	}
	w.mu.Unlock()

	c, cancel := w.opCtx(ctx)
	defer cancel()
	defer func() {
		w.mu.Lock()
		w.lastRenew = sent
		w.mu.Unlock()
	}()
	w.renewPresence(c, presenceRev, sent)
	if lead != nil {
		me := encode(Leader{Worker: w.id, Instance: w.cfg.instance})
		out, err := w.store.Update(c, coordination.Ephemeral, leaderKey, me, leaderRev)
		if err == nil && !out.Won() {
			// An earlier renewal may have landed with its reply lost: the
			// key is then still ours (our instance, which no one else
			// writes) at a newer revision.
			if e, gerr := w.store.Get(c, coordination.Ephemeral, leaderKey); gerr == nil {
				if cur, derr := decode[Leader](e.Key, e.Value); derr == nil && cur.Worker == w.id && cur.Instance == w.cfg.instance {
					out, err = w.store.Update(c, coordination.Ephemeral, leaderKey, me, e.Revision)
				}
			}
		}
		w.mu.Lock()
		if w.lead == lead {
			switch {
			case err == nil && out.Won():
				lead.leaderRev = out.Revision()
				lead.fence.ResetAt(sent.Add(w.ttl))
			case err == nil:
				lead.fence.Stop()
				w.lead = nil
				w.cfg.log.Info("leadership lost: leader key moved", "worker", w.id)
			}
		}
		w.mu.Unlock()
	}
	for _, l := range leases {
		if l.t.over.Load() {
			continue
		}
		val := encode(Lease{Owner: w.id, Instance: w.cfg.instance, Epoch: l.t.epoch})
		out, err := w.store.Update(c, coordination.Ephemeral, leaseKey(l.t.spec.ID), val, l.rev)
		if err != nil {
			w.cfg.log.Debug("lease renewal failed", "worker", w.id, "split", l.t.spec.ID, "err", err)
			continue // the self-fence timer decides
		}
		if !out.Won() {
			// An earlier renewal may have landed with its reply lost: the
			// lease is then still this tenancy's (same instance and epoch,
			// which nobody else writes) at a newer revision.
			if e, gerr := w.store.Get(c, coordination.Ephemeral, leaseKey(l.t.spec.ID)); gerr == nil {
				if cur, derr := decode[Lease](e.Key, e.Value); derr == nil && cur.Instance == w.cfg.instance && cur.Epoch == l.t.epoch {
					out, err = w.store.Update(c, coordination.Ephemeral, leaseKey(l.t.spec.ID), val, e.Revision)
					if err != nil {
						continue // the self-fence timer decides
					}
				}
			}
		}
		if !out.Won() {
			w.drop(l.t, LossLeaseLost)
			continue
		}
		w.mu.Lock()
		held := w.held[l.t.spec.ID] == l.t
		if held {
			l.t.leaseRev = out.Revision()
			l.t.armFence(sent.Add(w.ttl))
		}
		w.mu.Unlock()
		if !held {
			// The tenancy ended while this write was in flight: a release
			// deleted the lease at the revision before it and lost, so the
			// lease would linger a whole TTL and keep the next owner out.
			// Nobody else writes the lease at this revision.
			_, _ = w.store.Delete(c, coordination.Ephemeral, leaseKey(l.t.spec.ID), out.Revision())
		}
	}
}

func (w *Worker) renewPresence(ctx context.Context, rev coordination.Revision, sent time.Time) {
	me := encode(Presence{Worker: w.id, Instance: w.cfg.instance, Capacity: w.cfg.capacity})
	out, err := w.store.Update(ctx, coordination.Ephemeral, presenceKey(w.id), me, rev)
	if err != nil {
		return
	}
	if out.Won() {
		w.mu.Lock()
		w.presenceRev = out.Revision()
		w.presenceAt = sent
		w.mu.Unlock()
		return
	}
	// Our presence expired (outage) or was taken over by a twin, or an
	// earlier renewal landed with its reply lost.
	e, err := w.store.Get(ctx, coordination.Ephemeral, presenceKey(w.id))
	if err == nil {
		p, derr := decode[Presence](e.Key, e.Value)
		switch {
		case derr == nil && p.Instance != w.cfg.instance:
			select {
			case w.fatal <- duplicateWorker(w.id, p.Instance, w.cfg.instance):
			default:
			}
		case derr == nil:
			// Ours at a revision we never heard of: renew at it.
			if out, err := w.store.Update(ctx, coordination.Ephemeral, presenceKey(w.id), me, e.Revision); err == nil && out.Won() {
				w.mu.Lock()
				w.presenceRev = out.Revision()
				w.presenceAt = sent
				w.mu.Unlock()
			}
		}
		return
	}
	if errors.Is(err, coordination.ErrNotFound) {
		if out, err := w.store.Create(ctx, coordination.Ephemeral, presenceKey(w.id), me); err == nil && out.Won() {
			w.mu.Lock()
			w.presenceRev = out.Revision()
			w.presenceAt = sent
			w.mu.Unlock()
		}
	}
}

// drop ends a tenancy locally (no store write); returns its lease revision.
func (w *Worker) drop(t *Tenancy, reason string) coordination.Revision {
	w.mu.Lock()
	rev := t.leaseRev
	if w.held[t.spec.ID] != t {
		w.mu.Unlock()
		return rev
	}
	delete(w.held, t.spec.ID)
	t.over.Store(true)
	if t.fence != nil {
		t.fence.Stop()
	}
	revoking := false
	select {
	case <-t.revoking:
		revoking = true
	default:
	}
	if t.drain != nil {
		t.drain.Stop()
	}
	forced := t.forced
	// Set under w.mu: two tenancies ending at once would otherwise set
	// their counts in either order and leave the gauge stale.
	w.cfg.metrics.Owned.WithLabelValues(string(w.id)).Set(float64(len(w.held)))
	w.mu.Unlock()

	t.cancel()
	m := w.cfg.metrics
	if revoking {
		switch {
		case forced:
			reason = LossForced
			m.Revocations.WithLabelValues(string(w.id), "forced").Inc()
		case reason == LossReleased:
			reason = LossRevoked
			m.Revocations.WithLabelValues(string(w.id), "graceful").Inc()
		case reason != LossShutdown:
			m.Revocations.WithLabelValues(string(w.id), "lost").Inc() // ended otherwise while draining
		}
		m.Draining.WithLabelValues(string(w.id)).Dec()
	}
	m.Losses.WithLabelValues(string(w.id), reason).Inc()
	w.cfg.log.Info("split dropped", "worker", w.id, "split", t.spec.ID, "epoch", t.epoch, "reason", reason, "at", w.cfg.clock.Now())
	w.poke()
	return rev
}

// revoke starts a cooperative revocation with its drain deadline.
func (w *Worker) revoke(t *Tenancy) {
	// Callers revoke tenancies they listed a moment before. One that ended
	// meanwhile is left alone: drop, which takes it off the draining
	// gauge, has already run. Under w.mu, drop runs either before this
	// (not held) or after it (revoking, so it counts the end).
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[t.spec.ID] != t || !t.revoke() {
		return
	}
	w.cfg.metrics.Draining.WithLabelValues(string(w.id)).Inc()
	t.drain = w.cfg.clock.AfterFunc(w.cfg.drain, func() {
		w.mu.Lock()
		t.forced = true
		w.mu.Unlock()
		t.cancel()
		c, cancel := w.opCtx(context.Background())
		defer cancel()
		if err := t.release(c, false, LossForced); err != nil && !errors.Is(err, ErrFenced) {
			w.drop(t, LossForced) // store unreachable: the lease will expire
		}
	})
}

// step is one pass of the control loop over the mirrors.
func (w *Worker) step(ctx context.Context) {
	dur, dsync := w.durable.snapshot()
	eph, esync := w.ephemeral.snapshot()
	if !dsync || !esync {
		return
	}
	var plan *Plan
	if e, ok := dur[planKey]; ok {
		if p, err := cached[Plan](w, e); err == nil {
			plan = &p
		}
	}
	quarantined := 0
	for k, e := range dur {
		if strings.HasPrefix(k, progPrefix) {
			if p, err := cached[Progress](w, e); err == nil && p.Status == StatusQuarantined {
				quarantined++
			}
		}
	}
	w.cfg.metrics.Quarantined.WithLabelValues(string(w.id)).Set(float64(quarantined))
	w.pruneCache(dur, eph)

	w.leaderStep(ctx, dur, eph, plan)

	// Revoke what the plan moved elsewhere (absent from the plan: keep it).
	for _, t := range w.heldTenancies() {
		if e, ok := eph[leaseKey(t.spec.ID)]; ok {
			if l, err := cached[Lease](w, e); err == nil && (l.Instance != w.cfg.instance || l.Epoch != t.epoch) && l.Epoch > t.epoch {
				w.drop(t, LossLeaseLost)
				continue
			}
		}
		if plan == nil {
			continue
		}
		if owner, ok := plan.Assign[t.spec.ID]; ok && owner != w.id {
			w.revoke(t)
		}
	}
	if plan == nil {
		return
	}
	ids := make([]SplitID, 0)
	for id, owner := range plan.Assign {
		if owner == w.id {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		if _, held := w.Tenancy(id); held {
			continue
		}
		if _, leased := eph[leaseKey(id)]; leased {
			continue // wait for the holder to release or expire
		}
		se, ok := dur[specKey(id)]
		if !ok {
			continue
		}
		if pe, ok := dur[progKey(id)]; ok {
			if p, err := cached[Progress](w, pe); err == nil && p.Status == StatusQuarantined {
				continue
			}
		}
		spec, err := cached[Spec](w, se)
		if err != nil {
			continue
		}
		w.claim(ctx, spec)
	}
}

// claim writes the lease at epoch+1, then CASes the progress record.
func (w *Worker) claim(ctx context.Context, spec Spec) {
	// Not cut off when ctx ends (a graceful stop): a write that landed
	// with its reply cut off, and a clean-up that could not run, would
	// leave the lease for a TTL and the record Owned with no tenancy
	// behind it (a failed tenancy to the next claim). Run finishes the
	// claim, bounded by the call deadline, and its shutdown releases it.
	c, cancel := w.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	pe, err := w.store.Get(c, coordination.Durable, progKey(spec.ID))
	if err != nil {
		return
	}
	prev, err := decode[Progress](pe.Key, pe.Value)
	if err != nil || prev.Status == StatusQuarantined {
		return
	}
	epoch := prev.Epoch + 1
	sent := w.cfg.clock.Now()
	lo, err := w.store.Create(c, coordination.Ephemeral, leaseKey(spec.ID), encode(Lease{Owner: w.id, Instance: w.cfg.instance, Epoch: epoch}))
	if err != nil || !lo.Won() {
		return
	}
	attempts := prev.Attempts
	if prev.Status == StatusOwned {
		attempts++ // the previous tenancy ended without a release: it failed
	}
	next := Progress{Epoch: epoch, Status: StatusOwned, Owner: w.id, Attempts: attempts, Watermark: prev.Watermark, State: prev.State}
	if attempts >= w.cfg.maxAttempts {
		next = Progress{Epoch: epoch, Status: StatusQuarantined, Attempts: attempts, Watermark: prev.Watermark, State: prev.State}
	}
	po, err := w.store.Update(c, coordination.Durable, progKey(spec.ID), encode(next), pe.Revision)
	if err != nil && !coordination.IsFatal(err) && next.Status == StatusOwned {
		// The write may have landed with its reply lost (cut off at its
		// deadline). The record would then say Owned by this worker with
		// no tenancy behind it, and the next claim would count a failed
		// tenancy that never ran. Owned at this epoch by this worker is
		// what only this claim writes: we hold the epoch's lease.
		if e, gerr := w.store.Get(c, coordination.Durable, progKey(spec.ID)); gerr == nil {
			if cur, derr := decode[Progress](e.Key, e.Value); derr == nil && cur.Epoch == epoch && cur.Status == StatusOwned && cur.Owner == w.id {
				po, err = coordination.WonAt(e.Revision), nil
			}
		}
	}
	if err != nil || !po.Won() || next.Status == StatusQuarantined {
		if next.Status == StatusQuarantined && err == nil && po.Won() {
			w.cfg.log.Warn("split quarantined", "split", spec.ID, "failed_tenancies", attempts)
		}
		_, _ = w.store.Delete(c, coordination.Ephemeral, leaseKey(spec.ID), lo.Revision())
		return
	}
	tctx, tcancel := context.WithCancel(context.Background())
	t := &Tenancy{
		w: w, spec: spec, epoch: epoch, initial: prev,
		ctx: tctx, cancel: tcancel,
		revoking: make(chan struct{}), handled: make(chan struct{}),
		progRev: po.Revision(), watermark: prev.Watermark, state: prev.State, attempts: attempts,
		leaseRev: lo.Revision(),
	}
	w.mu.Lock()
	t.fence = w.cfg.clock.AfterFunc(w.ttl, func() { w.drop(t, LossSelfFence) })
	t.armFence(sent.Add(w.ttl)) // a full lease after the send, never later
	w.held[spec.ID] = t
	// Set under w.mu, as drop does, so a concurrent drop cannot be
	// overwritten by this count or overwrite it with an older one.
	w.cfg.metrics.Owned.WithLabelValues(string(w.id)).Set(float64(len(w.held)))
	w.mu.Unlock()
	w.cfg.metrics.Acquisitions.WithLabelValues(string(w.id)).Inc()
	w.cfg.log.Info("split acquired", "worker", w.id, "split", spec.ID, "epoch", epoch, "watermark", prev.Watermark, "sent", sent, "at", w.cfg.clock.Now())

	w.handlers.Go(func() {
		herr := w.cfg.handler(tctx, t)
		close(t.handled)
		if t.over.Load() {
			return
		}
		// An error caused by our own cancellation (forced revocation,
		// shutdown) is not a failed tenancy.
		failed := herr != nil && tctx.Err() == nil
		reason := LossReleased
		if failed {
			reason = LossFailed
		}
		for !t.over.Load() {
			rc, rcancel := w.opCtx(context.Background())
			err := t.release(rc, failed, reason)
			rcancel()
			if err == nil || errors.Is(err, ErrFenced) {
				return
			}
			if !sleep(tctx, w.cfg.clock, w.cfg.retry) {
				return // self-fenced meanwhile: the lease expires
			}
		}
	})
}

type decoded struct {
	rev coordination.Revision
	v   any
	err error
}

// cached decodes e once per revision (control loop only). The value is
// shared: callers must not mutate it.
func cached[T any](w *Worker, e coordination.Entry) (T, error) {
	if d, ok := w.cache[e.Key]; ok && d.rev == e.Revision {
		if d.err != nil {
			var zero T
			return zero, d.err
		}
		return d.v.(T), nil
	}
	v, err := decode[T](e.Key, e.Value)
	w.cache[e.Key] = decoded{rev: e.Revision, v: v, err: err}
	return v, err
}

func (w *Worker) pruneCache(dur, eph map[string]coordination.Entry) {
	if len(w.cache) <= 2*(len(dur)+len(eph))+64 {
		return
	}
	for k := range w.cache {
		_, d := dur[k]
		_, e := eph[k]
		if !d && !e {
			delete(w.cache, k)
		}
	}
}
