package split

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tflo-io/tflo/coordination"
)

// AddSplits registers splits: an immutable spec and an idle progress record
// each, created if absent. Re-adding an identical spec is a no-op; a spec
// that differs from the stored one is refused with an error naming the
// split.
func AddSplits(ctx context.Context, s coordination.Store, specs ...Spec) error {
	for _, spec := range specs {
		if err := spec.Validate(); err != nil {
			return err
		}
		val := encode(spec)
		out, err := s.Create(ctx, coordination.Durable, specKey(spec.ID), val)
		if err != nil {
			return fmt.Errorf("add split %q: %w", spec.ID, err)
		}
		if !out.Won() {
			e, err := s.Get(ctx, coordination.Durable, specKey(spec.ID))
			if err != nil {
				return fmt.Errorf("add split %q: %w", spec.ID, err)
			}
			if !bytes.Equal(e.Value, val) {
				return fmt.Errorf("add split %q: a different spec is already stored (%s, adding %s); specs are immutable", spec.ID, e.Value, val)
			}
		}
		if _, err := s.Create(ctx, coordination.Durable, progKey(spec.ID), encode(Progress{Status: StatusIdle})); err != nil {
			return fmt.Errorf("add split %q: %w", spec.ID, err)
		}
	}
	return nil
}

// ResetQuarantine returns a quarantined split to idle (attempts zero,
// watermark and state kept) so it can be claimed again.
func ResetQuarantine(ctx context.Context, s coordination.Store, id SplitID) error {
	e, err := s.Get(ctx, coordination.Durable, progKey(id))
	if err != nil {
		return fmt.Errorf("reset split %q: %w", id, err)
	}
	p, err := decode[Progress](e.Key, e.Value)
	if err != nil {
		return err
	}
	if p.Status != StatusQuarantined {
		return fmt.Errorf("reset split %q: status is %s, not %s", id, p.Status, StatusQuarantined)
	}
	p.Status, p.Attempts, p.Owner = StatusIdle, 0, ""
	out, err := s.Update(ctx, coordination.Durable, progKey(id), encode(p), e.Revision)
	if err != nil {
		return fmt.Errorf("reset split %q: %w", id, err)
	}
	if !out.Won() {
		return fmt.Errorf("reset split %q: progress record moved at revision %d; retry", id, e.Revision)
	}
	return nil
}

// View is a point-in-time reading of the protocol's records.
type View struct {
	Plan     *Plan
	Specs    map[SplitID]Spec
	Progress map[SplitID]Progress
	Leases   map[SplitID]Lease
	Workers  map[WorkerID]Presence
	Leader   *Leader
}

// Inspect lists both keyspaces and decodes every record.
func Inspect(ctx context.Context, s coordination.Store) (View, error) {
	v := View{Specs: map[SplitID]Spec{}, Progress: map[SplitID]Progress{}, Leases: map[SplitID]Lease{}, Workers: map[WorkerID]Presence{}}
	dur, err := s.List(ctx, coordination.Durable, "")
	if err != nil {
		return v, err
	}
	eph, err := s.List(ctx, coordination.Ephemeral, "")
	if err != nil {
		return v, err
	}
	var errs []error
	for _, e := range dur {
		switch {
		case e.Key == planKey:
			p, err := decode[Plan](e.Key, e.Value)
			errs = append(errs, err)
			v.Plan = &p
		case strings.HasPrefix(e.Key, specPrefix):
			sp, err := decode[Spec](e.Key, e.Value)
			errs = append(errs, err)
			v.Specs[SplitID(idFrom(e.Key, specPrefix))] = sp
		case strings.HasPrefix(e.Key, progPrefix):
			p, err := decode[Progress](e.Key, e.Value)
			errs = append(errs, err)
			v.Progress[SplitID(idFrom(e.Key, progPrefix))] = p
		}
	}
	for _, e := range eph {
		switch {
		case e.Key == leaderKey:
			l, err := decode[Leader](e.Key, e.Value)
			errs = append(errs, err)
			v.Leader = &l
		case strings.HasPrefix(e.Key, leasePrefix):
			l, err := decode[Lease](e.Key, e.Value)
			errs = append(errs, err)
			v.Leases[SplitID(idFrom(e.Key, leasePrefix))] = l
		case strings.HasPrefix(e.Key, presencePrefix):
			p, err := decode[Presence](e.Key, e.Value)
			errs = append(errs, err)
			v.Workers[WorkerID(idFrom(e.Key, presencePrefix))] = p
		}
	}
	return v, errors.Join(errs...)
}
