package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/internal/benchratio"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{"BenchmarkStoreOps": {"mutex-map": baselineMutexMap}})
}

// baselineMutexMap is the floor of any in-memory CAS store: a locked map
// read-compare-write.
func baselineMutexMap(b *testing.B) {
	var mu sync.Mutex
	m := map[string][]byte{}
	rev := map[string]uint64{}
	for b.Loop() {
		mu.Lock()
		r := rev["k"]
		m["k"] = append(m["k"][:0], "value-0123456789"...)
		rev["k"] = r + 1
		mu.Unlock()
	}
}

// BenchmarkStoreOps measures latency per operation (ns/op) and throughput
// (ops/s) of each primitive, with the ratio against a locked map update.
func BenchmarkStoreOps(b *testing.B) {
	ctx := context.Background()
	val := []byte("value-0123456789")
	for _, ks := range []coordination.Keyspace{coordination.Durable, coordination.Ephemeral} {
		b.Run(ks.String()+"/update", func(b *testing.B) {
			s, _ := memstore.New()
			o, _ := s.Create(ctx, ks, "k", val)
			rev := o.Revision()
			for b.Loop() {
				o, err := s.Update(ctx, ks, "k", val, rev)
				if err != nil || !o.Won() {
					b.Fatalf("update: %v %v", o, err)
				}
				rev = o.Revision()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			benchratio.Report(b, "mutex-map", baselineMutexMap)
		})
	}
	b.Run("durable/get", func(b *testing.B) {
		s, _ := memstore.New()
		_, _ = s.Create(ctx, coordination.Durable, "k", val)
		for b.Loop() {
			if _, err := s.Get(ctx, coordination.Durable, "k"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		benchratio.Report(b, "mutex-map", baselineMutexMap)
	})
	b.Run("durable/create+delete", func(b *testing.B) {
		s, _ := memstore.New()
		for b.Loop() {
			o, _ := s.Create(ctx, coordination.Durable, "k", val)
			if _, err := s.Delete(ctx, coordination.Durable, "k", o.Revision()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		benchratio.Report(b, "mutex-map", baselineMutexMap)
	})
	b.Run("durable/list-1000", func(b *testing.B) {
		s, _ := memstore.New()
		for i := range 1000 {
			_, _ = s.Create(ctx, coordination.Durable, fmt.Sprintf("p.k%04d", i), val)
		}
		for b.Loop() {
			if _, err := s.List(ctx, coordination.Durable, "p."); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		benchratio.Report(b, "mutex-map", baselineMutexMap)
	})
}
