package parquet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// smallFiles writes offsets [0, n) of shards 0 and 1 as one small file
// per `per` offsets (the archive of the old one-file-per-checkpoint sink).
func smallFiles(t testing.TB, a parquet.Archive, n, per int64, opts ...parquet.WriterOption) {
	t.Helper()
	ctx := context.Background()
	for shard := range int32(2) {
		w, err := parquet.NewWriter(a, "iot", shard, 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for off := range n {
			if err := w.Append(ctx, rowsAt(off)...); err != nil {
				t.Fatal(err)
			}
			if off%per == per-1 {
				if _, _, err := w.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, _, err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func readerRows(t testing.TB, a parquet.Archive) []parquet.Row {
	t.Helper()
	r, err := parquet.NewReader(a, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []parquet.Row
	for e, err := range r.All(context.Background(), parquet.Position{}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Row)
	}
	return out
}

func twoShards(n int64) []parquet.Row { return append(rowsThrough(n), rowsThrough(n)...) }

// The small files are snappy's, as a hot path that saves CPU writes
// them; compaction writes zstd.
func TestCompactMergesSmallOldFiles(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	start := time.Unix(1_700_000_000, 0)
	a.Now = func() time.Time { return start }
	smallFiles(t, a, 1000, 10, parquet.WithCompression(parquet.Snappy)) // 100 files per shard
	a.Now = func() time.Time { return start.Add(2 * time.Hour) }
	smallFiles2 := func() { // younger files of shard 1
		w, _ := parquet.NewWriter(a, "iot", 1, 1, parquet.WithCompression(parquet.Snappy))
		for off := int64(1000); off < 1050; off++ {
			_ = w.Append(ctx, rowsAt(off)...)
			if off%10 == 9 {
				_, _, _ = w.Flush(ctx)
			}
		}
	}
	smallFiles2()
	want := append(rowsThrough(1000), rowsThrough(1050)...)
	before, _ := readEveryFile(t, a)
	exactlyOnce(t, before, map[int32][]parquet.Row{0: rowsThrough(1000), 1: rowsThrough(1050)})

	p := parquet.DefaultCompactPolicy()
	p.TargetSize, p.SmallFile = 8<<10, 4<<10
	p.DryRun = true
	dry, err := parquet.Compact(ctx, a, "iot/", "", p, start.Add(2*time.Hour+30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Runs) == 0 {
		t.Fatal("the dry run plans nothing")
	}
	if after, _ := readEveryFile(t, a); len(after) != len(before) {
		t.Fatal("a dry run changed the archive")
	}
	p.DryRun = false
	res, err := parquet.Compact(ctx, a, "iot/", "", p, start.Add(2*time.Hour+30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 205 || res.Shards != 2 {
		t.Fatalf("compaction listed %d files in %d shards", res.Files, res.Shards)
	}
	after, names := readEveryFile(t, a)
	if len(names) >= 60 {
		t.Fatalf("%d files after compaction (%d runs)", len(names), len(res.Runs))
	}
	young := 0
	for _, n := range names {
		k, _ := parquet.ParseFileName(n)
		want := format.Zstd
		if k.Shard == 1 && k.First >= 1000 {
			young++
			want = format.Snappy
		}
		for _, rg := range openPQ(t, a, n).Metadata().RowGroups {
			if got := rg.Columns[0].MetaData.Codec; got != want {
				t.Fatalf("%s: row group compressed %v, want %v", n, got, want)
			}
		}
	}
	if young != 5 {
		t.Fatalf("%d of the 5 files younger than the minimum age are left as they were", young)
	}
	// Independent of the reader's rules: every row once.
	exactlyOnce(t, arrowReadArchive(t, a), map[int32][]parquet.Row{0: rowsThrough(1000), 1: rowsThrough(1050)})
	equalRows(t, readerRows(t, a), want)
	for _, run := range res.Runs {
		if run.Rows == 0 || run.BytesOut == 0 || len(run.Inputs) < 2 {
			t.Fatalf("run %+v", run)
		}
	}
	if len(after) != len(want) {
		t.Fatalf("%d rows in the files, want %d", len(after), len(want))
	}
}

// Files an older archive writer left after crashes and rebalances hold
// the same offsets more than once; the project's reader skips them, other
// readers count them twice. Compaction rewrites them without duplicates
// (issue 16.5).
func TestCompactRemovesDuplicateRows(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	smallFiles(t, a, 300, 20)
	// Replays: offsets 100..159 again under epoch 2 (the same rows), as
	// one file, and 40..59 again under epoch 3 with the same range as an
	// epoch-1 file.
	for _, rep := range []struct {
		epoch       streaming.Epoch
		first, last int64
	}{{2, 100, 159}, {3, 40, 59}} {
		w, _ := parquet.NewWriter(a, "iot", 0, rep.epoch)
		var rows []parquet.Row
		for off := rep.first; off <= rep.last; off++ {
			rows = append(rows, rowsAt(off)...)
		}
		if _, err := w.WriteFile(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := readEveryFile(t, a)
	if len(raw) == len(twoShards(300)) {
		t.Fatal("the setup made no duplicate")
	}
	equalRows(t, readerRows(t, a), twoShards(300))
	p := parquet.DefaultCompactPolicy()
	p.MinAge = 0
	res, err := parquet.Compact(ctx, a, "", "", p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Redundant) != 4 { // 100-119, 120-139, 140-159 and 40-59 e1
		t.Fatalf("redundant files %v", res.Redundant)
	}
	got, names := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{0: rowsThrough(300), 1: rowsThrough(300)})
	if len(names) != 2 {
		t.Fatalf("files after compaction: %v", names)
	}
	equalRows(t, readerRows(t, a), twoShards(300))
}

// A reader that is half-way through the archive when compaction swaps its
// files (the next ones deleted, a larger one covering them published)
// lists again and resumes after the last row it read, by offset: no row
// missing, none twice.
func TestCompactUnderAReader(t *testing.T) {
	for _, backend := range []string{"memory", "local"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var a fullArchive = parquet.NewMemArchive()
			if backend == "local" {
				la, err := parquet.NewLocalArchive(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				a = la
			}
			smallFiles(t, a, 600, 7)
			want := twoShards(600)
			r, err := parquet.NewReader(a, "", parquet.WithBatchRows(3))
			if err != nil {
				t.Fatal(err)
			}
			for _, stopAt := range []int{0, 250, 700, len(want) - 1} {
				var got []parquet.Row
				compacted := false
				p := parquet.DefaultCompactPolicy()
				p.MinAge = 0
				for e, err := range r.All(ctx, parquet.Position{}) {
					if err != nil {
						t.Fatalf("stop at %d: %v", stopAt, err)
					}
					got = append(got, e.Row)
					if len(got) == stopAt+1 && !compacted {
						compacted = true
						if _, err := parquet.Compact(ctx, a, "", "", p, time.Now()); err != nil {
							t.Fatal(err)
						}
					}
				}
				equalRows(t, got, want)
				// The next round compacts the compacted files again.
				p.TargetSize, p.SmallFile = p.TargetSize*4, p.TargetSize*2
			}
			// And a resume from a position whose file is gone.
			all := readAll(t, r, parquet.Position{})
			mid := all[len(all)/2]
			smallFiles(t, a, 600, 5) // new small files replace nothing: same offsets, epoch 1, other ranges
			p := parquet.DefaultCompactPolicy()
			p.MinAge = 0
			if _, err := parquet.Compact(ctx, a, "", "", p, time.Now()); err != nil {
				t.Fatal(err)
			}
			equalRows(t, rowsOf(readAll(t, r, mid.Pos.Next())), rowsOf(all[len(all)/2+1:]))
		})
	}
}

// Readers running while compaction rounds rewrite the archive again and
// again each read every row exactly once.
func TestCompactConcurrentReaders(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	smallFiles(t, a, 400, 3)
	want := twoShards(400)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	reads := make([]int, 3)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := parquet.NewReader(a, "", parquet.WithBatchRows(1+g))
			for {
				select {
				case <-stop:
					return
				default:
				}
				var got []parquet.Row
				for e, err := range r.All(ctx, parquet.Position{}) {
					if err != nil {
						errs <- fmt.Errorf("reader %d: %w", g, err)
						return
					}
					got = append(got, e.Row)
				}
				if len(got) != len(want) {
					errs <- fmt.Errorf("reader %d read %d rows, want %d", g, len(got), len(want))
					return
				}
				for i := range got {
					if got[i] != want[i] {
						errs <- fmt.Errorf("reader %d: row %d = %+v, want %+v", g, i, got[i], want[i])
						return
					}
				}
				reads[g]++
			}
		}()
	}
	p := parquet.DefaultCompactPolicy()
	p.MinAge, p.TargetSize, p.SmallFile = 0, 1<<10, 1<<10
	for round := 0; round < 6; round++ {
		if _, err := parquet.Compact(ctx, a, "", "", p, time.Now()); err != nil {
			t.Fatal(err)
		}
		p.TargetSize *= 2
		p.SmallFile = p.TargetSize
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, names := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{0: rowsThrough(400), 1: rowsThrough(400)})
	t.Logf("reads completed during compaction: %v; %d files left", reads, len(names))
}

// hangingAbort is an archive whose CompleteUpload fails and whose
// AbortUpload hangs until its context ends (a store that stopped
// answering), or the test ends.
type hangingAbort struct {
	*parquet.MemArchive
	release chan struct{}
}

func (h *hangingAbort) CompleteUpload(context.Context, string, string, []parquet.Part) error {
	return fmt.Errorf("complete upload: injected failure")
}

func (h *hangingAbort) AbortUpload(ctx context.Context, name, uploadID string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.release:
		return fmt.Errorf("test over")
	}
}

// A failed compaction aborted its upload under a context with no
// deadline (context.WithoutCancel of the caller's): against a store that
// stopped answering, Compact never returned, and a cancelled caller (a
// shutdown) waited for ever. The abort now has a deadline of its own.
func TestCompactAbortOfAFailedRunHasADeadline(t *testing.T) {
	defer parquet.SetCompactAbortTimeout(100 * time.Millisecond)()
	a := &hangingAbort{MemArchive: parquet.NewMemArchive(), release: make(chan struct{})}
	t.Cleanup(func() { close(a.release) })
	smallFiles(t, a, 100, 10)
	p := parquet.DefaultCompactPolicy()
	p.MinAge = 0
	done := make(chan error, 1)
	go func() {
		_, err := parquet.Compact(context.Background(), a, "", "", p, time.Now())
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("Compact: %v, want the failed upload's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Compact still aborting its upload after 10s")
	}
}
