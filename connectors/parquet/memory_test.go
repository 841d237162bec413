package parquet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// countingArchive records the byte ranges read through its objects and
// the names opened.
type countingArchive struct {
	parquet.Archive
	mu     sync.Mutex
	ranges [][2]int64
	opened []string
}

func (c *countingArchive) Open(ctx context.Context, name string) (parquet.Object, error) {
	c.mu.Lock()
	c.opened = append(c.opened, name)
	c.mu.Unlock()
	o, err := c.Archive.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingObject{Object: o, c: c}, nil
}

func (c *countingArchive) reset() {
	c.mu.Lock()
	c.ranges, c.opened = nil, nil
	c.mu.Unlock()
}

// opens returns how often name was opened since reset.
func (c *countingArchive) opens(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, o := range c.opened {
		if o == name {
			n++
		}
	}
	return n
}

// touched returns the number of distinct bytes read since reset.
func (c *countingArchive) touched() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[int64]bool{}
	for _, r := range c.ranges {
		for i := r[0]; i < r[1]; i++ {
			seen[i] = true
		}
	}
	return int64(len(seen))
}

type countingObject struct {
	parquet.Object
	c *countingArchive
}

func (o *countingObject) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.Object.ReadAt(p, off)
	o.c.mu.Lock()
	o.c.ranges = append(o.c.ranges, [2]int64{off, off + int64(n)})
	o.c.mu.Unlock()
	return n, err
}

// The reader streams one row group at a time: reading the first rows, or
// resuming near the end, touches the footer and one row group's pages, not
// the whole file. (This is what bounds a backfill's memory whatever the
// file size.)
func TestReaderTouchesOneRowGroup(t *testing.T) {
	ctx := context.Background()
	mem := parquet.NewMemArchive()
	const groups, perGroup = 20, 2000
	w, err := parquet.NewWriter(mem, "iot", 0, 1, parquet.WithRowGroupRows(perGroup), parquet.WithZstdLevel(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteFile(ctx, genRows(11, 0, groups*perGroup)); err != nil {
		t.Fatal(err)
	}
	objs, _ := mem.List(ctx, "")
	size := objs[0].Size

	ca := &countingArchive{Archive: mem}
	// Checksum verification off: it streams the whole file once (checked
	// below), which would hide what the decoder touches.
	r, err := parquet.NewReader(ca, "iot/", parquet.WithBatchRows(16), parquet.WithVerifyChecksum(false))
	if err != nil {
		t.Fatal(err)
	}
	all := readAll(t, r, parquet.Position{})
	if len(all) != groups*perGroup {
		t.Fatalf("read %d rows", len(all))
	}
	full := ca.touched()
	if full < size*9/10 {
		t.Fatalf("a full read touched %d of %d bytes; the counter is broken", full, size)
	}

	cases := []struct {
		name string
		from parquet.Position
	}{
		{"first rows", parquet.Position{}},
		{"resume in group 17", all[17*perGroup+5].Pos},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ca.reset()
			n := 0
			for _, err := range r.All(ctx, c.from) {
				if err != nil {
					t.Fatal(err)
				}
				if n++; n == 10 {
					break
				}
			}
			got := ca.touched()
			if limit := size * 3 / groups; got > limit {
				t.Fatalf("reading 10 rows touched %d bytes of a %d-byte file (limit %d: footer and about one row group)", got, size, limit)
			}
			t.Logf("touched %d of %d bytes", got, size)
		})
	}
}

// With verification on, the checksum pass reads the file in bounded
// chunks: no read is larger than 1 MiB, whatever the file size.
func TestReaderChecksumPassIsChunked(t *testing.T) {
	ctx := context.Background()
	mem := parquet.NewMemArchive()
	w, err := parquet.NewWriter(mem, "iot", 0, 1, parquet.WithZstdLevel(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteFile(ctx, genRows(12, 0, 300_000)); err != nil {
		t.Fatal(err)
	}
	objs, _ := mem.List(ctx, "")
	if objs[0].Size < 2<<20 {
		t.Fatalf("file is only %d bytes; make it larger than the chunk", objs[0].Size)
	}
	ca := &countingArchive{Archive: mem}
	r, _ := parquet.NewReader(ca, "iot/")
	plan, err := r.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ca.reset()
	for _, err := range r.File(ctx, plan[0], 0) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	for _, rg := range ca.ranges {
		if n := rg[1] - rg[0]; n > 1<<20 {
			t.Fatalf("a read of %d bytes at %d; want chunks of at most 1 MiB", n, rg[0])
		}
	}
}

// A file whose offsets earlier files all cover (an epoch that archived a
// range again, inputs a compaction published its output beside) yields no
// row: the reader knows it from the file's name and does not open it.
// Bug: it opened the file, streamed it whole for its checksum and decoded
// every row group to drop each row.
func TestReaderDoesNotReadCoveredFiles(t *testing.T) {
	ctx := context.Background()
	mem := parquet.NewMemArchive()
	write := func(epoch streaming.Epoch, rows []parquet.Row) string {
		t.Helper()
		w, err := parquet.NewWriter(mem, "iot", 0, epoch, parquet.WithRowGroupRows(100))
		if err != nil {
			t.Fatal(err)
		}
		k, err := w.WriteFile(ctx, rows)
		if err != nil {
			t.Fatal(err)
		}
		return k.Name()
	}
	write(1, genRows(1, 0, 1000))
	last := genRows(1, 0, 1000)[999].Offset
	covered := write(2, genRows(2, last-300, 300)) // offsets within the first file's
	write(1, genRows(3, last+1, 1000))
	for _, tc := range []struct {
		name   string
		verify bool
	}{{"checksum verified", true}, {"checksum not verified", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ca := &countingArchive{Archive: mem}
			var started []string
			r, err := parquet.NewReader(ca, "iot/", parquet.WithVerifyChecksum(tc.verify),
				parquet.WithOnFile(func(fi parquet.FileInfo) { started = append(started, fi.Name) }))
			if err != nil {
				t.Fatal(err)
			}
			all := readAll(t, r, parquet.Position{})
			if len(all) != 2000 {
				t.Fatalf("read %d rows, want 2000 (each offset's rows once)", len(all))
			}
			for _, e := range all {
				if e.Pos.File == covered {
					t.Fatalf("a row of the covered file %s was yielded: %+v", covered, e.Pos)
				}
			}
			if len(started) != 3 || started[1] != covered {
				t.Fatalf("files started %v, want the 3 files, the covered one second", started)
			}
			if n := ca.opens(covered); n != 0 {
				t.Fatalf("the covered file %s was opened %d times", covered, n)
			}
			plan, err := r.Plan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ca.reset()
			for _, err := range r.File(ctx, plan[1], 0) {
				t.Fatalf("File yielded from the covered file %s (err %v)", plan[1].Name, err)
			}
			if got := ca.touched(); got != 0 {
				t.Fatalf("File of the covered file %s read %d bytes", plan[1].Name, got)
			}
		})
	}
}

// compactingArchive runs a compaction of its archive (publishing the
// output, deleting the inputs) when the reader first opens the file
// named at.
type compactingArchive struct {
	*parquet.MemArchive
	t    *testing.T
	at   string
	done bool
}

func (c *compactingArchive) Open(ctx context.Context, name string) (parquet.Object, error) {
	if name == c.at && !c.done {
		c.done = true
		p := parquet.DefaultCompactPolicy()
		p.MinAge = 0
		res, err := parquet.Compact(ctx, c.MemArchive, "", "", p, time.Now())
		if err != nil || len(res.Runs) != 1 {
			c.t.Errorf("compaction: %+v, %v", res, err)
		}
	}
	return c.MemArchive.Open(ctx, name)
}

// A file compacted away between the reader's listing and its open is not
// reported to WithOnFile: the reader lists again and reads its rows from
// the compaction's output, reported with SkipThrough saying which of its
// offsets were read before. Bug: the gone file was reported as started
// (a backfill counted its bytes) and the output too, whole.
func TestReaderReportsAFileCompactedAwayOnce(t *testing.T) {
	ctx := context.Background()
	mem := parquet.NewMemArchive()
	w, err := parquet.NewWriter(mem, "iot", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for f := range int64(4) {
		k, err := w.WriteFile(ctx, genRows(uint64(f), f*100, 100))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, k.Name())
	}
	ca := &compactingArchive{MemArchive: mem, t: t, at: names[1]}
	var started []parquet.FileInfo
	r, err := parquet.NewReader(ca, "iot/", parquet.WithOnFile(func(fi parquet.FileInfo) { started = append(started, fi) }))
	if err != nil {
		t.Fatal(err)
	}
	all := readAll(t, r, parquet.Position{})
	if len(all) != 400 {
		t.Fatalf("read %d rows, want 400", len(all))
	}
	if !ca.done {
		t.Fatal("no compaction ran")
	}
	if len(started) != 2 || started[0].Name != names[0] || started[1].Key.First != 0 || started[1].Key.Last < 300 {
		t.Fatalf("files reported %+v, want the first file, then the compaction's output", started)
	}
	first := all[0].Pos
	for _, e := range all {
		if e.Pos.File == names[0] {
			first = e.Pos
		}
	}
	if got := started[1].SkipThrough; got < first.Offset-1 {
		t.Fatalf("the output's SkipThrough is %d; the offsets through %d were read from %s", got, first.Offset, names[0])
	}
}
