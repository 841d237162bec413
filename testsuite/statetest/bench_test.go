package statetest_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/streaming/state/files"
)

// benchKeys is the checkpoint size of the speed targets: 100k
// dirty keys.
const benchKeys = 100_000

// checkpointItems returns n snapshots shaped like one keyed SMA graph's
// state: ~130 bytes of operator state plus a Kafka cursor and two
// operators in the meta.
func checkpointItems(n int) []streaming.KeyedSnapshot {
	cur := streaming.KafkaOffset{Topic: "readings", Partition: 3, Offset: 1_000_000}.Bytes()
	ops := []streaming.OperatorInfo{{Node: "sma", Operator: "sma", TypeVersion: 1}, {Node: "cross", Operator: "threshold", TypeVersion: 1}}
	items := make([]streaming.KeyedSnapshot, n)
	for i := range items {
		data := make([]byte, 130)
		for j := range data {
			data[j] = byte(i*31 + j)
		}
		items[i] = streaming.KeyedSnapshot{
			Key: fmt.Appendf(nil, "sensor-%07d", i),
			Snapshot: streaming.Snapshot{
				Meta: streaming.SnapshotMeta{CursorType: streaming.CursorTypeKafka, Cursor: cur, Epoch: 7, Operators: ops, SchemaFingerprint: "9f1c0a77", CreatedUnixNano: 1_700_000_000_000_000_000},
				Data: data,
			},
		}
	}
	return items
}

var (
	itemsOnce  sync.Once
	benchItems []streaming.KeyedSnapshot
	benchBytes int64 // encoded bytes of one checkpoint
)

func items() []streaming.KeyedSnapshot {
	itemsOnce.Do(func() {
		benchItems = checkpointItems(benchKeys)
		for _, it := range benchItems {
			benchBytes += int64(len(it.Key) + streaming.SnapshotEncodedLen(it.Snapshot))
		}
	})
	return benchItems
}

func openBadger(b *testing.B, dir string) *badger.DB {
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func dirSize(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		// Allocated blocks, not the apparent size: Badger preallocates
		// sparse value-log files of 1 GiB.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// baselineWriteBatch writes the same keys and the same encoded bytes with
// a plain Badger WriteBatch: the floor any Badger-backed checkpoint pays.
func baselineWriteBatch(b *testing.B) {
	its := items()
	keys := make([][]byte, len(its))
	vals := make([][]byte, len(its))
	for i, it := range its {
		keys[i] = it.Key
		vals[i] = streaming.MarshalSnapshot(it.Snapshot)
	}
	db := openBadger(b, b.TempDir())
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for range b.N {
		wb := db.NewWriteBatch()
		for i := range keys {
			if err := wb.Set(keys[i], vals[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := wb.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// baselineBadgerGets reads the same keys back with plain Badger gets.
func baselineBadgerGets(b *testing.B) {
	its := items()
	db := openBadger(b, b.TempDir())
	wb := db.NewWriteBatch()
	for _, it := range its {
		if err := wb.Set(it.Key, streaming.MarshalSnapshot(it.Snapshot)); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for range b.N {
		for _, it := range its {
			err := db.View(func(txn *badger.Txn) error {
				item, err := txn.Get(it.Key)
				if err != nil {
					return err
				}
				_, err = item.ValueCopy(nil)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkCheckpointSaveBatch100k(b *testing.B) {
	ctx := context.Background()
	its := items()
	run := func(b *testing.B, s streaming.StateStore, dir string) {
		b.SetBytes(benchBytes)
		b.ResetTimer()
		for range b.N {
			if err := s.SaveBatch(ctx, its); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(dirSize(b, dir)), "disk-bytes")
		benchratio.Report(b, "badger-writebatch", baselineWriteBatch)
	}
	b.Run("badger", func(b *testing.B) {
		dir := b.TempDir()
		s, err := badgerstore.Open(badgerstore.WithPath(dir))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s, dir)
	})
	b.Run("badger-nosync", func(b *testing.B) {
		dir := b.TempDir()
		s, err := badgerstore.Open(badgerstore.WithPath(dir), badgerstore.WithSync(false))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s, dir)
	})
	b.Run("files", func(b *testing.B) {
		dir := b.TempDir()
		s, err := files.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s, dir)
	})
}

func BenchmarkRestoreLoad100k(b *testing.B) {
	ctx := context.Background()
	its := items()
	// loaders is how many goroutines restore concurrently (1 =
	// sequential Loads, as a single-threaded restore would).
	run := func(b *testing.B, s streaming.StateStore, loaders int) {
		if err := s.SaveBatch(ctx, its); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchBytes)
		b.ResetTimer()
		for range b.N {
			var wg sync.WaitGroup
			for w := range loaders {
				wg.Go(func() {
					for i := w; i < len(its); i += loaders {
						if _, err := s.Load(ctx, its[i].Key); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		b.StopTimer()
		benchratio.Report(b, "badger-gets", baselineBadgerGets)
	}
	for _, loaders := range []int{1, 8} {
		b.Run(fmt.Sprintf("badger/loaders=%d", loaders), func(b *testing.B) {
			s, err := badgerstore.Open(badgerstore.WithPath(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			run(b, s, loaders)
		})
		b.Run(fmt.Sprintf("files/loaders=%d", loaders), func(b *testing.B) {
			s, err := files.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			run(b, s, loaders)
		})
	}
}
