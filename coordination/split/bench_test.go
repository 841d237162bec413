package split_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/internal/benchratio"
)

func assignProblem(nSplits, nWorkers int) split.AssignInput {
	r := rand.New(rand.NewPCG(42, 7))
	var in split.AssignInput
	for i := range nSplits {
		in.Splits = append(in.Splits, split.Spec{ID: split.SplitID(fmt.Sprintf("s%05d", i)), Weight: uint32(1 + r.IntN(8))})
	}
	for i := range nWorkers {
		in.Workers = append(in.Workers, split.WorkerCap{ID: split.WorkerID(fmt.Sprintf("w%03d", i))})
	}
	return in
}

// baselineSort is the floor any deterministic assignment pays: sorting the
// splits by id.
func baselineSort(b *testing.B) {
	in := assignProblem(10_000, 50)
	for b.Loop() {
		s := slices.Clone(in.Splits)
		slices.SortFunc(s, func(a, b split.Spec) int { return cmp.Compare(a.ID, b.ID) })
	}
}

// BenchmarkAssign10k measures the assignment function at 10,000 splits over
// 50 workers: from scratch, and after a 51st worker joins a balanced plan
// (sticky + improving moves). The ratio is against sorting the splits.
func BenchmarkAssign10k(b *testing.B) {
	in := assignProblem(10_000, 50)
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			split.Assign(in)
		}
		benchratio.Report(b, "sort-10k-splits", baselineSort)
	})
	b.Run("join", func(b *testing.B) {
		join := in
		join.Current = split.Assign(in)
		join.Workers = append(slices.Clone(in.Workers), split.WorkerCap{ID: "w999"})
		for b.Loop() {
			split.Assign(join)
		}
		benchratio.Report(b, "sort-10k-splits", baselineSort)
	})
}

// baselineMoves is the minimal store work of moving 91 splits (1,000/11):
// per split a lease create and a progress CAS, sequentially, on the same
// memory store type.
func baselineMoves(b *testing.B) {
	for b.Loop() {
		s, _ := memstore.New()
		ctx := context.Background()
		for i := range 91 {
			k := fmt.Sprintf("s%03d", i)
			o, _ := s.Create(ctx, coordination.Durable, "prog."+k, []byte(`{}`))
			_, _ = s.Create(ctx, coordination.Ephemeral, "lease."+k, []byte(`{}`))
			_, _ = s.Update(ctx, coordination.Durable, "prog."+k, []byte(`{"epoch":2}`), o.Revision())
		}
	}
}

// BenchmarkJoinBalance1000 measures how long 10 workers take to balance
// 1,000 splits after the 10th joins 9 balanced ones (memory store, virtual
// clock stepped as fast as the workers keep up). Reports real time per
// rebalance, the virtual (protocol) time it took, and the ratio against the
// bare store writes of the moves.
func BenchmarkJoinBalance1000(b *testing.B) {
	var virtual time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := newCluster(b, 1000)
		c.app.recordEvery = time.Hour // no record traffic: measure coordination only
		for _, id := range workerIDs(9) {
			c.start(id)
		}
		c.until("nine workers balanced", c.balanced)
		start := c.clk.Now()
		b.StartTimer()
		c.start("w10")
		c.until("ten workers balanced", func() bool { return len(c.live()) == 10 && c.balanced() })
		b.StopTimer()
		virtual += c.clk.Now().Sub(start)
		c.stopAll()
		b.StartTimer()
	}
	b.ReportMetric(virtual.Seconds()/float64(b.N), "virtual-s/op")
	benchratio.Report(b, "store-writes-91-moves", baselineMoves)
}
