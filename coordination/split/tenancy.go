package split

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/streaming"
)

// Tenancy is one ownership period of one split by this worker, at one
// epoch. Its methods are safe for concurrent use; Commits are serialised,
// with each other and with the release that ends the tenancy.
type Tenancy struct {
	w       *Worker
	spec    Spec
	epoch   streaming.Epoch
	initial Progress

	ctx      context.Context
	cancel   context.CancelFunc
	revoking chan struct{}
	revOnce  sync.Once
	handled  chan struct{} // closed when the handler returned
	over     atomic.Bool

	mu        sync.Mutex // serialises progress CAS
	progRev   coordination.Revision
	watermark uint64
	state     []byte
	attempts  uint32

	// guarded by w.mu
	leaseRev coordination.Revision
	fence    coordination.Timer
	fenceAt  time.Time // when fence fires: a full lease after the last renewal sent
	drain    coordination.Timer
	forced   bool
}

// Spec is the split's immutable description.
func (t *Tenancy) Spec() Spec { return t.spec }

// Epoch is the fencing token of this tenancy: it rises by one at every
// claim of the split. Stamp it on every snapshot and cursor write of the
// split (it is the checkpoint's streaming.Epoch).
func (t *Tenancy) Epoch() streaming.Epoch { return t.epoch }

// Resume is the progress committed before this tenancy began: resume after
// Resume().Watermark with Resume().State.
func (t *Tenancy) Resume() Progress { return t.initial }

// Revoking is closed when the split is being moved away: stop intake,
// Commit the tail, return from the handler.
func (t *Tenancy) Revoking() <-chan struct{} { return t.revoking }

// Context ends when the tenancy is over.
func (t *Tenancy) Context() context.Context { return t.ctx }

// Watermark is the last committed watermark.
func (t *Tenancy) Watermark() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watermark
}

// Commit writes watermark and state together with a CAS at this tenancy's
// last-seen revision of the progress record. A lost CAS means a newer owner
// (or a release) moved the record: nothing is written, the tenancy ends and
// ErrFenced is returned. A watermark below the committed one is refused
// with ErrWatermarkRegression. A store error is returned as is (retry).
func (t *Tenancy) Commit(ctx context.Context, watermark uint64, state []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over.Load() {
		return fmt.Errorf("commit split %q epoch %d: %w", t.spec.ID, t.epoch, ErrFenced)
	}
	if watermark < t.watermark {
		return fmt.Errorf("commit split %q epoch %d: watermark %d is below the committed %d: %w",
			t.spec.ID, t.epoch, watermark, t.watermark, ErrWatermarkRegression)
	}
	p := Progress{Epoch: t.epoch, Status: StatusOwned, Owner: t.w.id, Attempts: 0, Watermark: watermark, State: state}
	out, err := t.w.store.Update(ctx, coordination.Durable, progKey(t.spec.ID), encode(p), t.progRev)
	if err != nil {
		return fmt.Errorf("commit split %q epoch %d: %w", t.spec.ID, t.epoch, err)
	}
	if cur, ok := t.landed(ctx, out); ok {
		if watermark < cur.Watermark {
			t.watermark, t.state = cur.Watermark, cur.State
			return fmt.Errorf("commit split %q epoch %d: watermark %d is below the committed %d: %w",
				t.spec.ID, t.epoch, watermark, cur.Watermark, ErrWatermarkRegression)
		}
		if out, err = t.w.store.Update(ctx, coordination.Durable, progKey(t.spec.ID), encode(p), t.progRev); err != nil {
			return fmt.Errorf("commit split %q epoch %d: %w", t.spec.ID, t.epoch, err)
		}
	}
	if !out.Won() {
		t.over.Store(true)
		go t.w.drop(t, LossFenced)
		return fmt.Errorf("commit split %q epoch %d at revision %d lost the CAS: %w", t.spec.ID, t.epoch, t.progRev, ErrFenced)
	}
	t.progRev = out.Revision()
	t.watermark = watermark
	t.state = append([]byte(nil), state...)
	t.attempts = 0
	return nil
}

// landed checks a lost CAS of the progress record (t.mu held): when an
// earlier write of this tenancy landed with its reply lost (a store call
// cut off at its deadline after the write was sent), the record is still
// this tenancy's, Owned at its epoch by this worker, which nobody else
// writes, at a revision it never heard of. landed then adopts that
// revision and returns the record, for the caller to write again at it.
func (t *Tenancy) landed(ctx context.Context, out coordination.CasOutcome) (Progress, bool) {
	if out.Won() {
		return Progress{}, false
	}
	e, err := t.w.store.Get(ctx, coordination.Durable, progKey(t.spec.ID))
	if err != nil {
		return Progress{}, false
	}
	cur, err := decode[Progress](e.Key, e.Value)
	if err != nil || cur.Epoch != t.epoch || cur.Status != StatusOwned || cur.Owner != t.w.id {
		return Progress{}, false
	}
	t.progRev = e.Revision
	return cur, true
}

// release marks the progress record Released (failed adds one attempt),
// ending the tenancy, then deletes its lease.
func (t *Tenancy) release(ctx context.Context, failed bool, reason string) error {
	t.mu.Lock()
	if t.over.Load() {
		t.mu.Unlock()
		return ErrFenced
	}
	attempts := t.attempts
	if failed {
		attempts++
	}
	p := Progress{Epoch: t.epoch, Status: StatusReleased, Owner: t.w.id, Attempts: attempts, Watermark: t.watermark, State: t.state}
	out, err := t.w.store.Update(ctx, coordination.Durable, progKey(t.spec.ID), encode(p), t.progRev)
	if err == nil && !out.Won() {
		if cur, ok := t.landed(ctx, out); ok {
			// Keep what the lost write committed (at least t.watermark).
			t.watermark, t.state = cur.Watermark, cur.State
			p.Watermark, p.State = cur.Watermark, cur.State
			out, err = t.w.store.Update(ctx, coordination.Durable, progKey(t.spec.ID), encode(p), t.progRev)
		}
	}
	if err != nil {
		t.mu.Unlock()
		return err
	}
	t.over.Store(true)
	if out.Won() {
		t.progRev = out.Revision()
	} else {
		reason = LossFenced
	}
	t.mu.Unlock()
	leaseRev := t.w.drop(t, reason)
	if out.Won() && leaseRev != 0 {
		_, _ = t.w.store.Delete(ctx, coordination.Ephemeral, leaseKey(t.spec.ID), leaseRev)
	}
	if !out.Won() {
		return ErrFenced
	}
	return nil
}

func (t *Tenancy) revoke() bool {
	first := false
	t.revOnce.Do(func() { close(t.revoking); first = true })
	return first
}

// armFence sets when the tenancy self-fences; the caller holds w.mu.
func (t *Tenancy) armFence(at time.Time) {
	t.fenceAt = at
	t.fence.ResetAt(at)
}
