package split

import (
	"cmp"
	"slices"
)

// WorkerCap is a live worker and its capacity in weight units (0 =
// unbounded).
type WorkerCap struct {
	ID       WorkerID
	Capacity uint64
}

// AssignInput is everything Assign looks at.
type AssignInput struct {
	// Splits are the assignable splits (quarantined ones left out).
	Splits []Spec
	// Workers are the live workers.
	Workers []WorkerCap
	// Current is the sticky starting point (the previous plan, completed
	// with current holders); entries naming dead workers or unknown splits
	// are ignored.
	Current map[SplitID]WorkerID
}

// Assign computes an assignment: a pure, deterministic function of its
// input (map order and slice order do not matter).
//
//  1. Sticky: every split keeps its current live worker, in split-id order,
//     while that worker's capacity allows.
//  2. Fill: unassigned splits, heaviest first, go to the least-loaded
//     worker with room.
//  3. Improve: while some split can move from a worker A to a worker B with
//     room such that load(B)+weight < load(A) — a move that strictly lowers
//     the sum of squared loads, so the loop ends — make the best such move
//     (heaviest A, lightest B, largest such split), then fill again.
//
// The result assigns each split at most once, respects capacities, leaves a
// split unassigned only when no worker has room for it, admits no improving
// move, and is a fixpoint: Assign with Current set to its own output returns
// the same map.
func Assign(in AssignInput) map[SplitID]WorkerID {
	splits := slices.Clone(in.Splits)
	slices.SortFunc(splits, func(a, b Spec) int { return cmp.Compare(a.ID, b.ID) })
	splits = slices.CompactFunc(splits, func(a, b Spec) bool { return a.ID == b.ID })
	workers := slices.Clone(in.Workers)
	slices.SortFunc(workers, func(a, b WorkerCap) int { return cmp.Compare(a.ID, b.ID) })
	workers = slices.CompactFunc(workers, func(a, b WorkerCap) bool { return a.ID == b.ID })

	out := make(map[SplitID]WorkerID, len(splits))
	if len(workers) == 0 {
		return out
	}
	a := &assigner{
		workers: workers,
		index:   make(map[WorkerID]int, len(workers)),
		load:    make([]uint64, len(workers)),
		owned:   make([][]Spec, len(workers)),
	}
	for i, w := range workers {
		a.index[w.ID] = i
	}
	var free []Spec
	for _, s := range splits {
		if wid, ok := in.Current[s.ID]; ok {
			if i, live := a.index[wid]; live && a.fits(i, s.Weight) {
				a.put(i, s)
				continue
			}
		}
		free = append(free, s)
	}
	for {
		free = a.fill(free)
		if !a.improve() {
			break
		}
	}
	for i, specs := range a.owned {
		for _, s := range specs {
			out[s.ID] = workers[i].ID
		}
	}
	return out
}

type assigner struct {
	workers []WorkerCap
	index   map[WorkerID]int
	load    []uint64
	owned   [][]Spec
}

func (a *assigner) fits(i int, w uint32) bool {
	c := a.workers[i].Capacity
	return c == 0 || a.load[i]+uint64(w) <= c
}

func (a *assigner) put(i int, s Spec) {
	a.owned[i] = append(a.owned[i], s)
	a.load[i] += uint64(s.Weight)
}

// fill places free splits, heaviest first; returns what found no room.
func (a *assigner) fill(free []Spec) []Spec {
	if len(free) == 0 {
		return nil
	}
	slices.SortStableFunc(free, func(x, y Spec) int {
		if c := cmp.Compare(y.Weight, x.Weight); c != 0 {
			return c
		}
		return cmp.Compare(x.ID, y.ID)
	})
	var left []Spec
	for _, s := range free {
		best := -1
		for i := range a.workers {
			if a.fits(i, s.Weight) && (best < 0 || a.load[i] < a.load[best]) {
				best = i
			}
		}
		if best < 0 {
			left = append(left, s)
			continue
		}
		a.put(best, s)
	}
	return left
}

// improve makes improving moves until none is left; reports whether it
// moved anything.
func (a *assigner) improve() bool {
	moved := false
	order := make([]int, len(a.workers))
	for {
		for i := range order {
			order[i] = i
		}
		// Heaviest first; ties by worker id (workers are id-sorted).
		slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(a.load[y], a.load[x]) })
		if !a.moveOne(order) {
			return moved
		}
		moved = true
	}
}

func (a *assigner) moveOne(order []int) bool {
	for _, from := range order {
		for k := len(order) - 1; k >= 0; k-- {
			to := order[k]
			if a.load[to] >= a.load[from] {
				break
			}
			gap := a.load[from] - a.load[to]
			best := -1
			for j, s := range a.owned[from] {
				w := uint64(s.Weight)
				if w >= gap || !a.fits(to, s.Weight) {
					continue
				}
				if best < 0 || w > uint64(a.owned[from][best].Weight) ||
					(w == uint64(a.owned[from][best].Weight) && s.ID < a.owned[from][best].ID) {
					best = j
				}
			}
			if best >= 0 {
				s := a.owned[from][best]
				a.owned[from] = slices.Delete(a.owned[from], best, best+1)
				a.load[from] -= uint64(s.Weight)
				a.put(to, s)
				return true
			}
		}
	}
	return false
}
