package parquet_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// rowsAt returns the rows the record at offset off produces: one or two
// signals, a pure function of off, so a replay produces the same rows.
func rowsAt(off int64) []parquet.Row {
	h := fnv.New64a()
	fmt.Fprint(h, off)
	x := h.Sum64()
	sensor := fmt.Sprintf("sensor-%02d", x%17)
	ts := 1_700_000_000_000_000_000 + off*1_000_000
	rows := []parquet.Row{{Sensor: sensor, Signal: "mean", TS: ts, Mode: int32(x % 3), Value: float64(x%10000) / 7, Offset: off}}
	if x%3 == 0 {
		rows = append(rows, parquet.Row{Sensor: sensor, Signal: "alarm_episode", TS: ts, Mode: 1, Value: float64(x % 97), Offset: off})
	}
	return rows
}

func rowsThrough(n int64) []parquet.Row {
	var out []parquet.Row
	for off := range n {
		out = append(out, rowsAt(off)...)
	}
	return out
}

// fullArchive is what a rolling writer needs of an archive.
type fullArchive interface {
	parquet.Archive
	parquet.Uploader
	parquet.Mover
	parquet.Deleter
}

// fileRow is a row read from a file of shard Shard.
type fileRow struct {
	Shard int32
	parquet.Row
}

// freshWriter is a rolling writer of shard of pipeline at epoch, on a,
// restored with no checkpoint (Cut -1).
func freshWriter(t testing.TB, a parquet.Archive, pipeline string, shard int32, epoch streaming.Epoch, opts ...parquet.WriterOption) *parquet.RollingWriter {
	t.Helper()
	w, err := parquet.NewRollingWriter(a, pipeline, shard, epoch, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Restore(context.Background(), parquet.RestorePoint{Cut: -1}); err != nil {
		t.Fatal(err)
	}
	return w
}

// compactTwoFiles compacts a's small files and fails the test unless
// that merged two files in one run.
func compactTwoFiles(t testing.TB, a parquet.Archive) {
	t.Helper()
	res, err := parquet.Compact(context.Background(), a, "", "", parquet.CompactPolicy{TargetSize: 1 << 30, SmallFile: 1 << 20}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 1 || len(res.Runs[0].Inputs) != 2 {
		t.Fatalf("compaction merged %+v, want the two files in one run", res.Runs)
	}
}

// readEveryFile reads every visible archive file from start to end, each
// on its own (no de-duplication across files, as an independent reader
// such as Spark or DuckDB over a glob would), and returns the rows in
// file-name order.
func readEveryFile(t testing.TB, a parquet.Archive) ([]fileRow, []string) {
	t.Helper()
	ctx := context.Background()
	var rows []fileRow
	var names []string
	for _, f := range visibleFiles(t, a) {
		names = append(names, f.Name)
		r, err := parquet.NewReader(a, f.Name)
		if err != nil {
			t.Fatal(err)
		}
		for e, err := range r.All(ctx, parquet.Position{}) {
			if err != nil {
				t.Fatalf("read %s: %v", f.Name, err)
			}
			rows = append(rows, fileRow{f.Key.Shard, e.Row})
		}
	}
	return rows, names
}

type visibleFile struct {
	Name string
	Key  parquet.FileKey
}

// visibleFiles lists the archive's published files (not its working
// objects) in name order.
func visibleFiles(t testing.TB, a parquet.Archive) []visibleFile {
	t.Helper()
	objs, err := a.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []visibleFile
	for _, o := range objs {
		if strings.HasPrefix(o.Name, parquet.StagingDir+"/") {
			continue
		}
		k, err := parquet.ParseFileName(o.Name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, visibleFile{o.Name, k})
	}
	return out
}

// exactlyOnce checks that got holds each row of want (by shard) exactly
// once, in any file order.
func exactlyOnce(t testing.TB, got []fileRow, want map[int32][]parquet.Row) {
	t.Helper()
	type key struct {
		shard  int32
		off    int64
		signal string
	}
	seen := map[key]parquet.Row{}
	for _, r := range got {
		k := key{r.Shard, r.Offset, r.Signal}
		if _, dup := seen[k]; dup {
			t.Fatalf("row (shard %d, offset %d, signal %s) is in the archive twice", r.Shard, r.Offset, r.Signal)
		}
		seen[k] = r.Row
	}
	n := 0
	for shard, rows := range want {
		for _, r := range rows {
			n++
			g, ok := seen[key{shard, r.Offset, r.Signal}]
			if !ok {
				t.Fatalf("row (shard %d, offset %d, signal %s) is missing from the archive (%d rows there)", shard, r.Offset, r.Signal, len(got))
			}
			if g != r {
				t.Fatalf("row at shard %d offset %d reads %+v, want %+v", shard, r.Offset, g, r)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("archive holds %d rows, want %d", len(got), n)
	}
}

type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.t.Add(int64(d)) }

func TestRollingWriterRollsAndPublishesAtCommit(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	clock := &fakeClock{}
	w := freshWriter(t, a, "iot", 3, 7, parquet.WithTargetFileSize(6<<10), parquet.WithMaxFileAge(time.Hour),
		parquet.WithRowGroupRows(256), parquet.WithClock(clock.Now))
	const n = 4000
	var published []parquet.FileKey
	var committedRows int64
	for off := int64(0); off < n; off++ {
		if err := w.Append(ctx, rowsAt(off)...); err != nil {
			t.Fatal(err)
		}
		if off%250 == 249 {
			cs, err := w.PreCommit(ctx, off)
			if err != nil {
				t.Fatal(err)
			}
			if cs.Rows == 0 || cs.Bytes == 0 {
				t.Fatalf("pre-commit of cut %d reports %+v", off, cs)
			}
			before, _ := readEveryFile(t, a)
			st, err := w.Commit(ctx, off)
			if err != nil {
				t.Fatal(err)
			}
			after, _ := readEveryFile(t, a)
			if got := int64(len(after) - len(before)); got != st.FileRows {
				t.Fatalf("commit of cut %d published %d rows, reports %d", off, got, st.FileRows)
			}
			committedRows += st.Rows
			published = append(published, st.Files...)
		}
	}
	w.Roll()
	if _, err := w.PreCommit(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	st, err := w.Commit(ctx, n-1)
	if err != nil {
		t.Fatal(err)
	}
	committedRows += st.Rows
	published = append(published, st.Files...)
	want := rowsThrough(n)
	if committedRows != int64(len(want)) {
		t.Fatalf("commits report %d rows, %d were appended", committedRows, len(want))
	}
	got, names := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{3: want})
	if len(names) < 4 || len(names) > 20 {
		t.Fatalf("%d files for %d rows at a 6 KiB target: %v", len(names), len(want), names)
	}
	for i, k := range published {
		if names[i] != k.Name() {
			t.Fatalf("file %d is %s, commit reported %s", i, names[i], k.Name())
		}
		if k.Epoch != 7 || k.Shard != 3 {
			t.Fatalf("file %s: shard or epoch wrong", k.Name())
		}
	}
	// The reader reads them back in order.
	r, err := parquet.NewReader(a, "iot/")
	if err != nil {
		t.Fatal(err)
	}
	equalRows(t, rowsOf(readAll(t, r, parquet.Position{})), want)
}

func TestRollingWriterRollsOnAgeAtACut(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	clock := &fakeClock{}
	w := freshWriter(t, a, "iot", 0, 1, parquet.WithMaxFileAge(15*time.Minute), parquet.WithClock(clock.Now))
	if err := w.Append(ctx, rowsAt(0)...); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, w, 0)
	if got, _ := readEveryFile(t, a); len(got) != 0 {
		t.Fatalf("a young file is visible: %d rows", len(got))
	}
	clock.Advance(15 * time.Minute)
	// A quiet partition: no new row, the age is noticed at the cut.
	st := mustCommit(t, w, 0)
	if len(st.Files) != 1 {
		t.Fatalf("commit after the file aged published %v", st.Files)
	}
	got, _ := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{0: rowsAt(0)})
}

func mustCommit(t *testing.T, w *parquet.RollingWriter, cut int64) parquet.CommitStats {
	t.Helper()
	ctx := context.Background()
	if _, err := w.PreCommit(ctx, cut); err != nil {
		t.Fatal(err)
	}
	st, err := w.Commit(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRollingWriterRefusesOutOfOrder(t *testing.T) {
	ctx := context.Background()
	w, err := parquet.NewRollingWriter(parquet.NewMemArchive(), "iot", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Restore(ctx, parquet.RestorePoint{Cut: 9, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, rowsAt(9)...); err == nil || !strings.Contains(err.Error(), "at or before the last cut 9") {
		t.Fatalf("append at the restored cut: %v", err)
	}
	if err := w.Append(ctx, rowsAt(11)...); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, rowsAt(10)...); err == nil || !strings.Contains(err.Error(), "source order") {
		t.Fatalf("append out of order: %v", err)
	}
	if _, err := w.PreCommit(ctx, 10); err == nil {
		t.Fatal("a cut before the last row appended was accepted")
	}
}

func TestRollingWriterNeedsCapabilities(t *testing.T) {
	_, err := parquet.NewRollingWriter(listOnly{parquet.NewMemArchive()}, "iot", 0, 1)
	if err == nil || !strings.Contains(err.Error(), "Uploader, Mover, Deleter") {
		t.Fatalf("archive without uploads: %v", err)
	}
}

type listOnly struct{ parquet.Archive }

// errCrash is what a crashing archive returns from the request the
// process "dies" at.
var errCrash = errors.New("injected crash")

// crashing wraps an archive and fails every request from the k-th on, as
// if the process died just before sending it (nothing after it reaches
// the store). Reset with arm.
type crashing struct {
	fullArchive
	n, at atomic.Int64
}

func (c *crashing) arm(at int64) { c.n.Store(0); c.at.Store(at) }

func (c *crashing) step() error {
	if at := c.at.Load(); at > 0 && c.n.Add(1) >= at {
		return errCrash
	}
	return nil
}

func (c *crashing) List(ctx context.Context, p string) ([]parquet.ObjectInfo, error) {
	if err := c.step(); err != nil {
		return nil, err
	}
	return c.fullArchive.List(ctx, p)
}

func (c *crashing) Open(ctx context.Context, n string) (parquet.Object, error) {
	if err := c.step(); err != nil {
		return nil, err
	}
	return c.fullArchive.Open(ctx, n)
}

func (c *crashing) PutAtomic(ctx context.Context, n string, d []byte) error {
	if err := c.step(); err != nil {
		return err
	}
	return c.fullArchive.PutAtomic(ctx, n, d)
}

func (c *crashing) CreateUpload(ctx context.Context, n string) (string, error) {
	if err := c.step(); err != nil {
		return "", err
	}
	return c.fullArchive.CreateUpload(ctx, n)
}

func (c *crashing) UploadPart(ctx context.Context, n, id string, p int, off int64, d []byte) (parquet.Part, error) {
	if err := c.step(); err != nil {
		return parquet.Part{}, err
	}
	return c.fullArchive.UploadPart(ctx, n, id, p, off, d)
}

func (c *crashing) CompleteUpload(ctx context.Context, n, id string, ps []parquet.Part) error {
	if err := c.step(); err != nil {
		return err
	}
	return c.fullArchive.CompleteUpload(ctx, n, id, ps)
}

func (c *crashing) AbortUpload(ctx context.Context, n, id string) error {
	if err := c.step(); err != nil {
		return err
	}
	return c.fullArchive.AbortUpload(ctx, n, id)
}

func (c *crashing) ListUploads(ctx context.Context, p string) ([]parquet.Upload, error) {
	if err := c.step(); err != nil {
		return nil, err
	}
	if ul, ok := c.fullArchive.(parquet.UploadLister); ok {
		return ul.ListUploads(ctx, p)
	}
	return nil, nil
}

func (c *crashing) Move(ctx context.Context, from, to string) error {
	if err := c.step(); err != nil {
		return err
	}
	return c.fullArchive.Move(ctx, from, to)
}

func (c *crashing) Delete(ctx context.Context, names ...string) error {
	if err := c.step(); err != nil {
		return err
	}
	return c.fullArchive.Delete(ctx, names...)
}

// TestRollingWriterExactlyOnceUnderCrashes drives a shard through appends,
// checkpoints whose state commits or fails, lost commit notifications and
// crashes at random requests (inside PreCommit, Commit and Restore too),
// restoring each time from the last checkpoint whose state committed and
// replaying the source from after its cut. At the end every row is in
// exactly one visible file, as read file by file.
func TestRollingWriterExactlyOnceUnderCrashes(t *testing.T) {
	backends := []struct {
		name string
		new  func(t *testing.T) fullArchive
	}{
		{"memory", func(t *testing.T) fullArchive { return parquet.NewMemArchive() }},
		{"local", func(t *testing.T) fullArchive {
			a, err := parquet.NewLocalArchive(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return a
		}},
	}
	for _, be := range backends {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/seed%d", be.name, seed), func(t *testing.T) {
				crashModel(t, be.new(t), seed)
			})
		}
	}
}

func crashModel(t *testing.T, inner fullArchive, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 99))
	a := &crashing{fullArchive: inner}
	clock := &fakeClock{}
	const total = 1500
	epoch := streaming.Epoch(1)
	committed := parquet.RestorePoint{Cut: -1}
	opts := []parquet.WriterOption{
		parquet.WithTargetFileSize(int64(2<<10 + rng.IntN(8<<10))), parquet.WithMaxFileAge(10 * time.Minute),
		parquet.WithRowGroupRows(int64(16 + rng.IntN(200))), parquet.WithPartSize(int64(512 + rng.IntN(4096))),
		parquet.WithClock(clock.Now),
	}
	var w *parquet.RollingWriter
	var off int64
	crashes := 0
	// restart makes a new owner (a new epoch) restore the shard,
	// surviving crashes inside Restore itself.
	restart := func() {
		for {
			epoch++
			var err error
			if w, err = parquet.NewRollingWriter(a, "iot", 5, epoch, opts...); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 {
				a.arm(int64(1 + rng.IntN(6)))
			} else {
				a.arm(0)
			}
			_, err = w.Restore(ctx, committed)
			if err == nil {
				break
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("restore to %+v: %v", committed, err)
			}
			crashes++
		}
		a.arm(0)
		off = committed.Cut + 1
	}
	// crashed handles an error from the writer: an injected crash makes a
	// new owner restore; anything else fails the test.
	crashed := func(op string, err error) bool {
		if err == nil {
			return false
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("%s: %v", op, err)
		}
		crashes++
		restart()
		return true
	}
	restart()
	for off < total {
		clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		if rng.IntN(400) == 0 {
			a.arm(int64(1 + rng.IntN(4))) // die at one of the next requests
		}
		switch p := rng.IntN(100); {
		case p < 85:
			if crashed("append", w.Append(ctx, rowsAt(off)...)) {
				continue
			}
			off++
		case p < 97:
			cut := off - 1
			if _, err := w.PreCommit(ctx, cut); crashed("pre-commit", err) {
				continue
			}
			if rng.IntN(10) == 0 {
				continue // the checkpoint's state save failed: not committed
			}
			committed = parquet.RestorePoint{Cut: cut, Epoch: epoch}
			if rng.IntN(8) == 0 {
				continue // the commit notification is lost
			}
			if _, err := w.Commit(ctx, cut); crashed("commit", err) {
				continue
			}
		case p < 98:
			w.Roll()
		default:
			crashes++
			restart() // the process dies between requests
		}
	}
	a.arm(0)
	w.Roll()
	if _, err := w.PreCommit(ctx, total-1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx, total-1); err != nil {
		t.Fatal(err)
	}
	got, names := readEveryFile(t, inner)
	exactlyOnce(t, got, map[int32][]parquet.Row{5: rowsThrough(total)})
	// File names are deterministic and in offset order: the listing
	// reads back in source order.
	r, err := parquet.NewReader(inner, "iot/")
	if err != nil {
		t.Fatal(err)
	}
	equalRows(t, rowsOf(readAll(t, r, parquet.Position{})), rowsThrough(total))
	if crashes == 0 {
		t.Fatal("no crash was injected")
	}
	staging, err := inner.List(ctx, parquet.StagingDir+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(staging) > 1 {
		t.Fatalf("after the last commit, staging holds %v", staging)
	}
	if ma, ok := inner.(*parquet.MemArchive); ok && ma.Uploads() != 0 {
		t.Fatalf("%d uploads left in progress", ma.Uploads())
	}
	t.Logf("%d crashes, %d files", crashes, len(names))
}

// recordSizes returns the sizes of the pre-commit records in the staging
// folder of pipeline iot's shard.
func recordSizes(t testing.TB, a parquet.Archive, shard int32) []int64 {
	t.Helper()
	prefix := parquet.StagingPrefix("iot", shard)
	objs, err := a.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, o := range objs {
		if strings.HasPrefix(strings.TrimPrefix(o.Name, prefix), "rec-") {
			sizes = append(sizes, o.Size)
		}
	}
	return sizes
}

// checkpointOneFile appends perCheckpoint rows to shard 2's writer w and
// checkpoints them, checkpoints times, into one open file, then appends
// and pre-commits once more without committing (the checkpoint whose
// state save fails). It returns the next offset and the size of the
// largest pre-commit record after checkpoint 10 and after the last one.
func checkpointOneFile(t *testing.T, a parquet.Archive, w *parquet.RollingWriter, checkpoints, perCheckpoint int) (off, early, late int64) {
	t.Helper()
	ctx := context.Background()
	for i := range checkpoints + 1 {
		for range perCheckpoint {
			if err := w.Append(ctx, rowsAt(off)...); err != nil {
				t.Fatal(err)
			}
			off++
		}
		if _, err := w.PreCommit(ctx, off-1); err != nil {
			t.Fatal(err)
		}
		if i == checkpoints {
			break // pre-committed; its state save fails
		}
		if st, err := w.Commit(ctx, off-1); err != nil || len(st.Files) != 0 {
			t.Fatalf("commit of cut %d: published %v, %v", off-1, st.Files, err)
		}
		switch i {
		case 10:
			early = slices.Max(recordSizes(t, a, 2))
		case checkpoints - 1:
			late = slices.Max(recordSizes(t, a, 2))
		}
	}
	return off, early, late
}

// finishCommitted restores shard 2 at epoch 2 from the checkpoint of cut
// committed (epoch 1), which finishes checkpointOneFile's open file, and
// checks that the archive then holds that one file with exactly the
// committed rows. It returns the file names.
func finishCommitted(t *testing.T, a parquet.Archive, opts []parquet.WriterOption, committed int64) []string {
	t.Helper()
	w, err := parquet.NewRollingWriter(a, "iot", 2, 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.Restore(context.Background(), parquet.RestorePoint{Cut: committed, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Files) != 1 {
		t.Fatalf("restore published %v, want the one open file", st.Files)
	}
	got, names := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{2: rowsThrough(committed + 1)})
	if len(names) != 1 {
		t.Fatalf("files %v, want one", names)
	}
	return names
}

// TestRollingWriterRestoresAFileOfManyPreCommits: every pre-commit record
// re-encoded the row-group metadata of the whole open file, so a record
// (and a checkpoint's pre-commit) grew with the file's age, and the
// thrift walker charged each struct in a list 1 KiB, so a file of more
// than about 360 row groups (six minutes of one-second checkpoints of a
// busy shard) could neither be restored from its record nor read: "exceed
// the decode budget". A file open across 300 checkpoints, a row group or
// more each, now keeps records of about the same size, and a new owner
// restoring the last committed checkpoint (the one after it
// pre-committed but never committed) finishes the file with exactly the
// committed rows, which the reader reads. Records in the older format
// (row groups inline) still restore.
func TestRollingWriterRestoresAFileOfManyPreCommits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline bool
	}{{"segments", false}, {"inline", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a := parquet.NewMemArchive()
			opts := []parquet.WriterOption{parquet.WithRowGroupRows(8), parquet.WithMaxFileAge(time.Hour)}
			if tc.inline {
				opts = append(opts, parquet.WithInlineRowGroups())
			}
			w := freshWriter(t, a, "iot", 2, 1, opts...)
			const checkpoints, perCheckpoint = 300, 8
			off, early, late := checkpointOneFile(t, a, w, checkpoints, perCheckpoint)
			t.Logf("record at checkpoint 10: %d bytes, at %d: %d bytes", early, checkpoints-1, late)
			// What still grows is the list of parts (a memory archive takes
			// a part per pre-commit, about 55 bytes each in a record); the
			// row groups inline added a kilobyte or more per checkpoint.
			if growth := (late - early) / (checkpoints - 11); !tc.inline && growth > 100 {
				t.Fatalf("the pre-commit record grew from %d bytes at checkpoint 10 to %d at checkpoint %d, %d bytes per checkpoint", early, late, checkpoints-1, growth)
			}
			names := finishCommitted(t, a, opts, off-1-perCheckpoint)
			// The finished file holds a row group per checkpoint or more.
			o, err := a.Open(ctx, names[0])
			if err != nil {
				t.Fatal(err)
			}
			f, err := pq.OpenFile(o, o.Size())
			if err != nil {
				t.Fatal(err)
			}
			if n := len(f.Metadata().RowGroups); n < checkpoints {
				t.Fatalf("%s holds %d row groups, want %d or more", names[0], n, checkpoints)
			}
			staging, err := a.List(ctx, parquet.StagingDir+"/")
			if err != nil {
				t.Fatal(err)
			}
			if len(staging) != 0 || a.Uploads() != 0 {
				t.Fatalf("after the restore, staging holds %v and %d uploads", staging, a.Uploads())
			}
		})
	}
}

// On a local folder a part is written in place after the one before, so
// the pre-commit record keeps the parts so far as one: across 200
// checkpoints of one open file its record grows by the end of each
// checkpoint's row-group segment (about 4 bytes), not by a part (another
// 55 or so, 11 KiB in all), and a new owner restoring the last committed
// checkpoint finishes the file with exactly the committed rows.
func TestRollingWriterLocalRecordKeepsOnePart(t *testing.T) {
	a, err := parquet.NewLocalArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts := []parquet.WriterOption{parquet.WithRowGroupRows(8), parquet.WithMaxFileAge(time.Hour)}
	w := freshWriter(t, a, "iot", 2, 1, opts...)
	const checkpoints, perCheckpoint = 200, 8
	off, early, late := checkpointOneFile(t, a, w, checkpoints, perCheckpoint)
	if growth := (late - early) / (checkpoints - 11); growth > 8 {
		t.Fatalf("the pre-commit record grew from %d bytes at checkpoint 10 to %d at checkpoint %d, %d bytes per checkpoint", early, late, checkpoints-1, growth)
	}
	finishCommitted(t, a, opts, off-1-perCheckpoint)
}

// A shard stopped after its final checkpoint, whose files compaction then
// merged, starts again: its last commit left no pre-commit record naming
// files already published. Bug: Commit kept the newest record at or
// before its cut, which listed the files it had just published as
// sealed, and the next owner's Restore tried to publish them again; once
// compaction had merged and deleted them, Move found neither object and
// Restore failed (the shard's source failed the same way on every retry).
func TestRollingWriterRestoresAfterCompactionOfItsLastFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) fullArchive
	}{
		{"memory", func(*testing.T) fullArchive { return parquet.NewMemArchive() }},
		{"local", func(t *testing.T) fullArchive {
			a, err := parquet.NewLocalArchive(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a := tc.new(t)
			w := freshWriter(t, a, "p", 0, 1)
			for _, cut := range []int64{4, 9} { // two files, the second by the final checkpoint's roll
				for off := cut - 4; off <= cut; off++ {
					if err := w.Append(ctx, rowsAt(off)...); err != nil {
						t.Fatal(err)
					}
				}
				w.Roll()
				if _, err := w.PreCommit(ctx, cut); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Commit(ctx, cut); err != nil {
					t.Fatal(err)
				}
			}
			staged, err := a.List(ctx, parquet.StagingPrefix("p", 0))
			if err != nil {
				t.Fatal(err)
			}
			if len(staged) != 0 {
				t.Errorf("after the final commit, with every file published, the staging folder still holds %v", staged)
			}
			compactTwoFiles(t, a)
			w2, err := parquet.NewRollingWriter(a, "p", 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w2.Restore(ctx, parquet.RestorePoint{Cut: 9, Epoch: 1}); err != nil {
				t.Fatalf("the next owner's restore at the final checkpoint: %v", err)
			}
			got, names := readEveryFile(t, a)
			exactlyOnce(t, got, map[int32][]parquet.Row{0: rowsThrough(10)})
			if len(names) != 1 {
				t.Fatalf("archive files %v, want the one compacted file", names)
			}
		})
	}
}

// A restore at a checkpoint whose record lists files the checkpoint's
// commit published, beside the file still open (the record stays: it
// finishes that file), used to fail for good once compaction had merged
// and deleted those files: the record's files were neither staged nor
// published any more ("neither exists").
func TestRollingWriterRestoresAfterCompactionOfCommittedFilesBesideAnOpenOne(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	clk := &fakeClock{}
	w := freshWriter(t, a, "p", 0, 1, parquet.WithMaxFileAge(time.Minute), parquet.WithClock(clk.Now))
	for off := range int64(3) { // files [0] and [1] finished by age, [2] open
		if off > 0 {
			clk.Advance(time.Hour)
		}
		if err := w.Append(ctx, rowsAt(off)...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.PreCommit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st := mustCommit(t, w, 2); len(st.Files) != 2 {
		t.Fatalf("commit published %v, want the two finished files", st.Files)
	}
	compactTwoFiles(t, a)
	// The owner crashed after the commit; the next one restores its checkpoint.
	w2, err := parquet.NewRollingWriter(a, "p", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w2.Restore(ctx, parquet.RestorePoint{Cut: 2, Epoch: 1})
	if err != nil {
		t.Fatalf("the next owner's restore at the committed checkpoint: %v", err)
	}
	if len(st.Files) != 1 || st.Files[0].First != 2 || st.Rows != int64(len(rowsAt(2))) {
		t.Errorf("restore published %v (%d rows), want the open file [2] alone", st.Files, st.Rows)
	}
	got, _ := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{0: rowsThrough(3)})
}

// A file is finished once it reaches the target size, not before: its
// encoded bytes not yet uploaded as a part used to be counted twice (in
// the file's size and again as pending), so with parts larger than the
// target files were finished at about half of it.
func TestRollingWriterFinishesFilesAtTheTargetSize(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	const target = 16 << 10
	w := freshWriter(t, a, "iot", 0, 1, parquet.WithTargetFileSize(target), parquet.WithMaxFileAge(time.Hour),
		parquet.WithRowGroupRows(64), parquet.WithPartSize(1<<20))
	const n = 3000
	for off := int64(0); off < n; off++ {
		if err := w.Append(ctx, rowsAt(off)...); err != nil {
			t.Fatal(err)
		}
	}
	w.Roll()
	if _, err := w.PreCommit(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	st, err := w.Commit(ctx, n-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Files) < 3 {
		t.Fatalf("%d files; the test wants several", len(st.Files))
	}
	objs, err := a.List(ctx, "iot/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs[:len(objs)-1] { // the last one was rolled
		if o.Size < target {
			t.Errorf("%s: %d bytes, finished before the %d-byte target", o.Name, o.Size, target)
		}
	}
	got, _ := readEveryFile(t, a)
	exactlyOnce(t, got, map[int32][]parquet.Row{0: rowsThrough(n)})
}
