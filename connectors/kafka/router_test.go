package kafka

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

func TestRouterEpochs(t *testing.T) {
	a, b := Partition{"t", 0}, Partition{"t", 1}
	type step struct {
		name   string
		gain   bool
		gen    int32
		ps     []Partition
		owns   []Partition
		minEp  streaming.Epoch
		sameEp bool // no change expected
	}
	steps := []step{
		{name: "assign in gen 1", gain: true, gen: 1, ps: []Partition{a, b}, owns: []Partition{a, b}, minEp: 1 << 32},
		{name: "revoke b in gen 2", gen: 2, ps: []Partition{b}, owns: []Partition{a}, minEp: 2 << 32},
		{name: "empty change", gain: true, gen: 3, sameEp: true, owns: []Partition{a}},
		{name: "reassign b in gen 2 (same generation)", gain: true, gen: 2, ps: []Partition{b}, owns: []Partition{a, b}},
		{name: "lost without generation", gen: -1, ps: []Partition{a, b}},
		{name: "assign in gen 9", gain: true, gen: 9, ps: []Partition{a}, owns: []Partition{a}, minEp: 9 << 32},
	}
	r := NewShardRouter()
	prev := r.AssignmentEpoch()
	for _, s := range steps {
		var ep streaming.Epoch
		if s.gain {
			ep = r.Assign(s.gen, s.ps...)
		} else {
			ep = r.Revoke(s.gen, s.ps...)
		}
		require.Equal(t, ep, r.AssignmentEpoch(), s.name)
		if s.sameEp {
			require.Equal(t, prev, ep, s.name)
		} else {
			require.Greater(t, ep, prev, "%s: epoch must strictly increase", s.name)
			require.GreaterOrEqual(t, ep, s.minEp, s.name)
		}
		for _, p := range []Partition{a, b} {
			require.Equal(t, contains(s.owns, p), r.Owns(p), "%s: owns %s", s.name, p)
		}
		prev = ep
	}
}

func contains(ps []Partition, p Partition) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// TestRouterOwnsAt: work scheduled at an epoch is valid only while the
// ownership that began at or before that epoch lasts.
func TestRouterOwnsAt(t *testing.T) {
	p := Partition{"t", 3}
	r := NewShardRouter()
	e1 := r.Assign(1, p)
	require.True(t, r.OwnsAt(p, e1))
	require.False(t, r.OwnsAt(p, e1-1), "work scheduled before the partition was gained")
	r.Revoke(2, p)
	require.False(t, r.OwnsAt(p, e1))
	e3 := r.Assign(3, p)
	require.False(t, r.OwnsAt(p, e1), "an old epoch's work must not pass after a re-assign")
	require.True(t, r.OwnsAt(p, e3))
	since, ok := r.GainedAt(p)
	require.True(t, ok)
	require.Equal(t, e3, since)
}

func TestRouterConcurrent(t *testing.T) {
	r := NewShardRouter()
	var wg sync.WaitGroup
	seen := make([][]streaming.Epoch, 4)
	for i := range 4 {
		wg.Go(func() {
			p := Partition{"t", int32(i)}
			for range 200 {
				seen[i] = append(seen[i], r.Assign(-1, p), r.Revoke(-1, p))
				_ = r.Owns(p)
			}
		})
	}
	wg.Wait()
	all := map[streaming.Epoch]bool{}
	for _, s := range seen {
		for k := 1; k < len(s); k++ {
			require.Greater(t, s[k], s[k-1])
		}
		for _, e := range s {
			require.False(t, all[e], "epoch %d handed out twice", e)
			all[e] = true
		}
	}
	require.Equal(t, streaming.Epoch(1600), r.AssignmentEpoch())
}
