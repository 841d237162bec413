package split

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// genInput draws a random assignment problem: 0–12 workers with random or
// unbounded capacities, 0–80 splits with weights 1–9, and a random (partly
// stale) current assignment naming live, dead and unknown entries.
func genInput(r *rand.Rand) AssignInput {
	var in AssignInput
	nw := r.IntN(13)
	for i := range nw {
		c := uint64(0)
		if r.IntN(3) > 0 {
			c = uint64(r.IntN(40))
		}
		in.Workers = append(in.Workers, WorkerCap{ID: WorkerID(fmt.Sprintf("w%02d", i)), Capacity: c})
	}
	ns := r.IntN(81)
	in.Current = map[SplitID]WorkerID{}
	for i := range ns {
		id := SplitID(fmt.Sprintf("s%03d", i))
		w := uint32(1 + r.IntN(9))
		if r.IntN(2) == 0 {
			w = 1
		}
		in.Splits = append(in.Splits, Spec{ID: id, Weight: w})
		if r.IntN(2) == 0 {
			in.Current[id] = WorkerID(fmt.Sprintf("w%02d", r.IntN(nw+3))) // some dead
		}
	}
	in.Current["unknown"] = "w00"
	return in
}

func shuffled(r *rand.Rand, in AssignInput) AssignInput {
	out := AssignInput{Current: maps.Clone(in.Current)}
	out.Splits = append(out.Splits, in.Splits...)
	out.Workers = append(out.Workers, in.Workers...)
	r.Shuffle(len(out.Splits), func(i, j int) { out.Splits[i], out.Splits[j] = out.Splits[j], out.Splits[i] })
	r.Shuffle(len(out.Workers), func(i, j int) { out.Workers[i], out.Workers[j] = out.Workers[j], out.Workers[i] })
	return out
}

func loads(in AssignInput, out map[SplitID]WorkerID) map[WorkerID]uint64 {
	weight := map[SplitID]uint32{}
	for _, s := range in.Splits {
		weight[s.ID] = s.Weight
	}
	l := map[WorkerID]uint64{}
	for _, w := range in.Workers {
		l[w.ID] = 0
	}
	for s, w := range out {
		l[w] += uint64(weight[s])
	}
	return l
}

func fits(w WorkerCap, load uint64, weight uint32) bool {
	return w.Capacity == 0 || load+uint64(weight) <= w.Capacity
}

const propertyCases = 2000

func forEachCase(t *testing.T, check func(t *testing.T, r *rand.Rand, in AssignInput, out map[SplitID]WorkerID)) {
	for seed := range uint64(propertyCases) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		in := genInput(r)
		out := Assign(in)
		check(t, r, in, out)
		if t.Failed() {
			t.Fatalf("seed %d: input %+v\noutput %v", seed, in, out)
		}
	}
}

func TestAssignDeterministic(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, in AssignInput, out map[SplitID]WorkerID) {
		require.Equal(t, out, Assign(in), "same input, same output")
		require.Equal(t, out, Assign(shuffled(r, in)), "input order must not matter")
	})
}

func TestAssignNoSplitTwiceValidCapacity(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, in AssignInput, out map[SplitID]WorkerID) {
		splits := map[SplitID]bool{}
		for _, s := range in.Splits {
			splits[s.ID] = true
		}
		workers := map[WorkerID]WorkerCap{}
		for _, w := range in.Workers {
			workers[w.ID] = w
		}
		// A map cannot hold a split twice; check it holds only real splits
		// on live workers and that no worker is over capacity.
		for s, w := range out {
			require.True(t, splits[s], "assigned unknown split %s", s)
			_, live := workers[w]
			require.True(t, live, "split %s assigned to dead worker %s", s, w)
		}
		for w, l := range loads(in, out) {
			if c := workers[w].Capacity; c > 0 {
				require.LessOrEqual(t, l, c, "worker %s over capacity", w)
			}
		}
	})
}

func TestAssignFixpoint(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, in AssignInput, out map[SplitID]WorkerID) {
		again := in
		again.Current = out
		require.Equal(t, out, Assign(again), "feeding the output back must change nothing")
	})
}

func TestAssignNoImprovingMove(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, in AssignInput, out map[SplitID]WorkerID) {
		l := loads(in, out)
		for _, s := range in.Splits {
			from, ok := out[s.ID]
			if !ok {
				continue
			}
			for _, to := range in.Workers {
				if to.ID == from || !fits(to, l[to.ID], s.Weight) {
					continue
				}
				require.False(t, l[to.ID]+uint64(s.Weight) < l[from],
					"improving move left: %s (w=%d) from %s (load %d) to %s (load %d)", s.ID, s.Weight, from, l[from], to.ID, l[to.ID])
			}
		}
	})
}

func TestAssignEveryAssignableSplitAssigned(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, in AssignInput, out map[SplitID]WorkerID) {
		l := loads(in, out)
		for _, s := range in.Splits {
			if _, ok := out[s.ID]; ok {
				continue
			}
			for _, w := range in.Workers {
				require.False(t, fits(w, l[w.ID], s.Weight),
					"split %s (w=%d) unassigned while %s has room (load %d, cap %d)", s.ID, s.Weight, w.ID, l[w.ID], w.Capacity)
			}
		}
	})
}

func TestAssignSticky(t *testing.T) {
	// A balanced current assignment is kept as is, and a joining worker
	// takes only as many splits as balancing needs.
	var in AssignInput
	in.Current = map[SplitID]WorkerID{}
	for i := range 30 {
		id := SplitID(fmt.Sprintf("s%02d", i))
		in.Splits = append(in.Splits, Spec{ID: id, Weight: 1})
		in.Current[id] = WorkerID(fmt.Sprintf("w%d", i%3))
	}
	in.Workers = []WorkerCap{{ID: "w0"}, {ID: "w1"}, {ID: "w2"}}
	require.Equal(t, in.Current, Assign(in))

	in.Workers = append(in.Workers, WorkerCap{ID: "w3"})
	out := Assign(in)
	moved := 0
	for s, w := range out {
		if in.Current[s] != w {
			moved++
			require.Equal(t, WorkerID("w3"), w, "only moves to the joiner")
		}
	}
	require.Equal(t, 7, moved, "30 splits over 4 workers: the joiner takes 7, nothing else moves")
}

func TestAssignEmpty(t *testing.T) {
	require.Empty(t, Assign(AssignInput{Splits: []Spec{{ID: "a", Weight: 1}}}))
	require.Empty(t, Assign(AssignInput{Workers: []WorkerCap{{ID: "w"}}}))
}
