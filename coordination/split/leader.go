package split

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/tflo-io/tflo/coordination"
)

// leaderStep runs for leadership when the leader key is absent and, while
// leading, publishes the assignment when it changes.
//
// Fencing: a new leader's first act is a CAS of the plan record that bumps
// its generation, so every later plan write of an older leader (a CAS at the
// revision it last saw) loses; a leader that loses a plan CAS, or sees a plan
// revision it did not write, steps down.
func (w *Worker) leaderStep(ctx context.Context, dur, eph map[string]coordination.Entry, plan *Plan) {
	w.mu.Lock()
	lead := w.lead
	w.mu.Unlock()
	if lead == nil {
		if _, ok := eph[leaderKey]; !ok {
			w.elect(ctx)
		}
		return
	}
	if e, ok := dur[planKey]; ok && e.Revision > lead.planRev && !w.takeUpPlan(lead, e) {
		w.stepDown(ctx, lead, "plan written by another leader")
		return
	}
	if w.cfg.clock.Now().Before(lead.since.Add(w.ttl)) {
		// Grace period: let workers that lost their presence in an outage
		// re-register before reassigning their splits.
		return
	}

	var in AssignInput
	for k, e := range eph {
		if strings.HasPrefix(k, presencePrefix) {
			if p, err := cached[Presence](w, e); err == nil {
				in.Workers = append(in.Workers, WorkerCap{ID: p.Worker, Capacity: p.Capacity})
			}
		}
	}
	in.Current = maps.Clone(lead.plan.Assign)
	if in.Current == nil {
		in.Current = map[SplitID]WorkerID{}
	}
	for k, e := range dur {
		if !strings.HasPrefix(k, specPrefix) {
			continue
		}
		spec, err := cached[Spec](w, e)
		if err != nil {
			continue
		}
		if pe, ok := dur[progKey(spec.ID)]; ok {
			if p, err := cached[Progress](w, pe); err == nil && p.Status == StatusQuarantined {
				continue
			}
		}
		in.Splits = append(in.Splits, spec)
		if _, ok := in.Current[spec.ID]; !ok {
			if le, ok := eph[leaseKey(spec.ID)]; ok {
				if l, err := cached[Lease](w, le); err == nil {
					in.Current[spec.ID] = l.Owner
				}
			}
		}
	}
	start := time.Now()
	next := Assign(in)
	w.cfg.metrics.AssignTime.WithLabelValues(string(w.id)).Observe(time.Since(start).Seconds())
	if maps.Equal(next, lead.plan.Assign) {
		return
	}
	np := Plan{Generation: lead.plan.Generation, Leader: w.id, Assign: next}
	c, cancel := w.opCtx(ctx)
	defer cancel()
	out, err := w.store.Update(c, coordination.Durable, planKey, encode(np), lead.planRev)
	if err == nil && !out.Won() {
		if e, gerr := w.store.Get(c, coordination.Durable, planKey); gerr == nil && w.takeUpPlan(lead, e) {
			out, err = w.store.Update(c, coordination.Durable, planKey, encode(np), lead.planRev)
		}
	}
	if err != nil {
		return
	}
	if !out.Won() {
		w.stepDown(ctx, lead, "plan CAS lost")
		return
	}
	w.mu.Lock()
	if w.lead == lead {
		lead.planRev = out.Revision()
		lead.plan = np
	}
	w.mu.Unlock()
}

// takeUpPlan adopts e, a plan at a revision lead never heard of, when it
// is lead's own: written by an update whose reply was lost (cut off at
// its deadline after it was sent). A plan of lead's generation naming
// this worker as leader is one only lead writes.
func (w *Worker) takeUpPlan(lead *leadership, e coordination.Entry) bool {
	p, err := decode[Plan](e.Key, e.Value)
	if err != nil || p.Leader != w.id || p.Generation != lead.plan.Generation {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lead != lead {
		return false
	}
	lead.planRev, lead.plan = e.Revision, p
	return true
}

func (w *Worker) elect(ctx context.Context) {
	// Not cut off when ctx ends (a graceful stop), as claim: a plan write
	// cut off after it landed, and the leader key's delete that backs out
	// of the election, would leave the leader key for a TTL with nobody
	// leading. Run finishes the election and its shutdown withdraws it.
	c, cancel := w.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	sent := w.cfg.clock.Now()
	lo, err := w.store.Create(c, coordination.Ephemeral, leaderKey, encode(Leader{Worker: w.id, Instance: w.cfg.instance}))
	if err != nil || !lo.Won() {
		return
	}
	var prev Plan
	var prevRev coordination.Revision
	pe, err := w.store.Get(c, coordination.Durable, planKey)
	switch {
	case err == nil:
		if prev, err = decode[Plan](pe.Key, pe.Value); err != nil {
			prev = Plan{}
		}
		prevRev = pe.Revision
	case !errors.Is(err, coordination.ErrNotFound):
		_, _ = w.store.Delete(c, coordination.Ephemeral, leaderKey, lo.Revision())
		return
	}
	np := Plan{Generation: prev.Generation + 1, Leader: w.id, Assign: prev.Assign}
	var po coordination.CasOutcome
	if prevRev == 0 {
		po, err = w.store.Create(c, coordination.Durable, planKey, encode(np))
	} else {
		po, err = w.store.Update(c, coordination.Durable, planKey, encode(np), prevRev)
	}
	if err != nil || !po.Won() {
		_, _ = w.store.Delete(c, coordination.Ephemeral, leaderKey, lo.Revision())
		return
	}
	lead := &leadership{leaderRev: lo.Revision(), planRev: po.Revision(), plan: np, since: sent}
	w.mu.Lock()
	lead.fence = w.cfg.clock.AfterFunc(w.ttl, func() { w.loseLead(lead, "leader self-fence") })
	lead.fence.ResetAt(sent.Add(w.ttl))
	w.lead = lead
	w.mu.Unlock()
	w.cfg.log.Info("leadership won", "worker", w.id, "generation", np.Generation)
	w.poke()
}

func (w *Worker) loseLead(lead *leadership, why string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lead != lead {
		return false
	}
	lead.fence.Stop()
	w.lead = nil
	w.cfg.log.Info("leadership lost", "worker", w.id, "why", why)
	return true
}

func (w *Worker) stepDown(ctx context.Context, lead *leadership, why string) {
	if !w.loseLead(lead, why) {
		return
	}
	// Even when ctx has ended (a graceful stop): the shutdown withdraws
	// only the leadership it still holds, so a key left here would stay a
	// TTL with nobody leading.
	c, cancel := w.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	_, _ = w.store.Delete(c, coordination.Ephemeral, leaderKey, lead.leaderRev)
}
