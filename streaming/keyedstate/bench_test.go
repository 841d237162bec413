package keyedstate_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/streaming/state/files"
)

const benchKeys = 100_000

func benchKey(i int) string { return fmt.Sprintf("sensor/%06d", i) }

// openDiskDB opens an on-disk Badger sized for a 512 MiB budget (the
// budget the 100k-key benchmarks give their runtimes).
func openDiskDB(b *testing.B, dir string) *badger.DB {
	b.Helper()
	db, err := badger.Open(keyedstate.BadgerOptions(dir, 512<<20).WithLogger(nil))
	require.NoError(b, err)
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// dirtyAll applies one record to each of the 100k keys.
func dirtyAll(b *testing.B, rt *keyedstate.Runtime[string], round int) {
	b.Helper()
	require.NoError(b, rt.Process(func(tx *keyedstate.Tx[string]) error {
		for i := range benchKeys {
			if _, err := tx.Eval(benchKey(i), int64(round), streaming.Float(float64(i+round))); err != nil {
				return err
			}
		}
		tx.SetCursor("seq", seqCursor(round*benchKeys))
		return nil
	}))
}

// sampleState returns the state blob of a key that has seen a few records,
// for sizing the baseline.
func sampleState(b *testing.B, g *streaming.Graph) []byte {
	in := g.NewInstance()
	for i := range 10 {
		in.Eval(int64(i), streaming.Float(float64(i)))
	}
	s, err := in.Save()
	require.NoError(b, err)
	return s
}

// writeBatchBaseline writes 100k keys of state blobs the size of the
// runtime's with one Badger WriteBatch, then syncs: the floor a checkpoint
// of 100k keys to Badger is measured against.
func writeBatchBaseline(state []byte) func(*testing.B) {
	return func(b *testing.B) {
		if state == nil {
			state = sampleState(b, smaGraph(b))
		}
		db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithLogger(nil))
		require.NoError(b, err)
		b.Cleanup(func() { _ = db.Close() })
		keys := make([][]byte, benchKeys)
		for i := range keys {
			keys[i] = []byte("base/" + benchKey(i))
		}
		b.ResetTimer()
		for range b.N {
			wb := db.NewWriteBatch()
			for _, k := range keys {
				if err := wb.Set(k, state); err != nil {
					b.Fatal(err)
				}
			}
			if err := wb.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := db.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func openStore(b *testing.B, backend string) streaming.StateStore {
	b.Helper()
	switch backend {
	case "badger":
		s, err := badgerstore.Open(badgerstore.WithPath(b.TempDir()))
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		return s
	case "files":
		s, err := files.Open(b.TempDir())
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	b.Fatalf("unknown backend %q", backend)
	return nil
}

// BenchmarkCheckpoint100kDirty: one checkpoint of 100k changed keys
// (snapshot → pieces → store → manifest → cursor), beside a plain Badger
// WriteBatch of the same number of state blobs.
func BenchmarkCheckpoint100kDirty(b *testing.B) {
	ctx := context.Background()
	g := smaGraph(b)
	for _, backend := range []string{"badger", "files"} {
		b.Run(backend, func(b *testing.B) {
			rt := newRuntime(b, g, openDiskDB(b, b.TempDir()), keyedstate.WithMemoryBudget(512<<20))
			store := openStore(b, backend)
			cp, err := streaming.NewCheckpointer("bench", rt, store, store.(streaming.CursorStore), streaming.WithMaxRuns(1<<20))
			require.NoError(b, err)
			var bytes int64
			var stall time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				dirtyAll(b, rt, i+1)
				b.StartTimer()
				res, err := cp.Checkpoint(ctx)
				if err != nil {
					b.Fatal(err)
				}
				bytes += res.Bytes
				stall += rt.Stats().LastCutStall
			}
			b.StopTimer()
			b.ReportMetric(float64(bytes)/float64(b.N), "B/checkpoint")
			b.ReportMetric(float64(stall.Nanoseconds())/float64(b.N), "cut-stall-ns")
			benchratio.Report(b, "badger-writebatch-100k", nil)
		})
	}
}

// BenchmarkRestore100k: restore 100k keys from a checkpoint into a
// runtime's Badger, beside the plain WriteBatch of the same blobs.
func BenchmarkRestore100k(b *testing.B) {
	ctx := context.Background()
	g := smaGraph(b)
	for _, backend := range []string{"badger", "files"} {
		b.Run(backend, func(b *testing.B) {
			src := newRuntime(b, g, openDiskDB(b, b.TempDir()), keyedstate.WithMemoryBudget(512<<20))
			store := openStore(b, backend)
			cp, err := streaming.NewCheckpointer("bench", src, store, store.(streaming.CursorStore))
			require.NoError(b, err)
			dirtyAll(b, src, 1)
			_, err = cp.Checkpoint(ctx)
			require.NoError(b, err)

			dst := newRuntime(b, g, openDiskDB(b, b.TempDir()), keyedstate.WithMemoryBudget(512<<20))
			rcp, err := streaming.NewCheckpointer("bench", dst, store, store.(streaming.CursorStore))
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				info, err := rcp.Restore(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if st := dst.Stats(); st.RestoredItems != benchKeys {
					b.Fatalf("restored %d items, want %d", st.RestoredItems, benchKeys)
				}
				_ = info
			}
			b.StopTimer()
			benchratio.Report(b, "badger-writebatch-100k", nil)
		})
	}
}

// BenchmarkCutStall measures how long marking a cut holds the runtime's
// lock — the only time the hot path waits for a checkpoint — beside the
// cost of applying one record. Each op applies one record, cuts and
// releases the cut; stall-ns/cut is the lock hold of the cut alone.
// (BenchmarkCheckpoint100kDirty reports the same stall for cuts of 100k
// changed keys.)
func BenchmarkCutStall(b *testing.B) {
	ctx := context.Background()
	g := smaGraph(b)
	rt := newRuntime(b, g, openDiskDB(b, b.TempDir()), keyedstate.WithMemoryBudget(512<<20))
	dirtyAll(b, rt, 1)
	var stall time.Duration
	b.ResetTimer()
	for i := range b.N {
		if _, err := rt.Apply(benchKey(i%1000), int64(i), "seq", nil, streaming.Float(1)); err != nil {
			b.Fatal(err)
		}
		c, err := rt.Cut(ctx)
		if err != nil {
			b.Fatal(err)
		}
		stall += rt.Stats().LastCutStall
		c.Release(true)
	}
	b.StopTimer()
	b.ReportMetric(float64(stall.Nanoseconds())/float64(b.N), "stall-ns/cut")
	benchratio.Report(b, "apply-one-record", nil)
}

// baselineApply is the cost of applying one record to a cached key.
func baselineApply(b *testing.B) {
	rt := newRuntime(b, smaGraph(b), openDiskDB(b, b.TempDir()), keyedstate.WithMemoryBudget(512<<20))
	b.ResetTimer()
	for i := range b.N {
		if _, err := rt.Apply(benchKey(i%1000), int64(i), "seq", nil, streaming.Float(1)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHotPathDuringSave applies records while a cut of 100k changed
// keys is being saved (pieces read and encoded), beside the same loop with
// no save running; it reports the longest single-record pause seen.
func BenchmarkHotPathDuringSave(b *testing.B) {
	lat := hotPathLoop(b, true)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)*999/1000].Microseconds()), "p999-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
	benchratio.Report(b, "apply-no-save", nil)
}

func baselineApplyNoSave(b *testing.B) { hotPathLoop(b, false) }

func hotPathLoop(b *testing.B, saving bool) []time.Duration {
	ctx := context.Background()
	g := smaGraph(b)
	rt := newRuntime(b, g, openDiskDB(b, b.TempDir()), keyedstate.WithMemoryBudget(512<<20))
	dirtyAll(b, rt, 1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	if saving {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c, err := rt.Cut(ctx)
				if err != nil {
					panic(err)
				}
				_ = c.Pieces(ctx, func([]byte) error { return nil })
				c.Release(true)
			}
		}()
	}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := rt.Apply(benchKey(i%benchKeys), int64(i), "seq", nil, streaming.Float(1)); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	if saving {
		b.ReportMetric(float64(rt.Stats().SaveHoldMax.Microseconds()), "save-lock-hold-max-µs")
	}
	return lat
}
