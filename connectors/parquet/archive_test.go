package parquet_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
)

func TestLocalArchiveConformance(t *testing.T) {
	archivetest.Run(t, func(t *testing.T) parquet.Archive {
		a, err := parquet.NewLocalArchive(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return a
	})
}

func TestMemArchiveConformance(t *testing.T) {
	archivetest.Run(t, func(t *testing.T) parquet.Archive { return parquet.NewMemArchive() })
}

// A crash in the middle of PutAtomic leaves a temp file behind; it must
// never show up in a listing or be taken for an archive file.
func TestLocalArchiveHidesTempFiles(t *testing.T) {
	dir := t.TempDir()
	a, err := parquet.NewLocalArchive(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.PutAtomic(ctx, "p/shard-000000/done.parquet", []byte("whole")); err != nil {
		t.Fatal(err)
	}
	// What a crash after CreateTemp and a partial write leaves.
	if err := os.WriteFile(filepath.Join(dir, "p", "shard-000000", ".tmp-half.parquet-123"), []byte("ha"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := a.List(ctx, "p/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Name != "p/shard-000000/done.parquet" {
		t.Fatalf("List = %+v, want only the finished file", objs)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "p", "shard-000000"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("folder has %d entries, want the file and the crash litter", len(entries))
	}
}

// Regression: the temp files a crash in PutAtomic left stayed in their
// folder for ever. The first PutAtomic into a folder deletes those last
// written over an hour ago, and keeps a recent one (a live writer's,
// maybe of another process sharing the folder). Regression: a folder was
// swept once per process, so a temp file too young at that sweep (a
// worker restarted within the hour of its crash) stayed while the
// process lived; a PutAtomic into the folder an hour later deletes it.
func TestLocalArchiveSweepsStaleTempFiles(t *testing.T) {
	dir := t.TempDir()
	a, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	var clock atomic.Int64 // added to the time
	parquet.SetLocalArchiveClock(a, func() time.Time { return time.Now().Add(time.Duration(clock.Load())) })
	ctx := context.Background()
	folder := filepath.Join(dir, parquet.StagingDir, "iot")
	require.NoError(t, os.MkdirAll(folder, 0o755))
	stale := filepath.Join(folder, ".tmp-rec.json-111")
	live := filepath.Join(folder, ".tmp-rec.json-222")
	for _, p := range []string{stale, live} {
		require.NoError(t, os.WriteFile(p, []byte("ha"), 0o644))
	}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(stale, old, old))
	require.NoError(t, a.PutAtomic(ctx, parquet.StagingDir+"/iot/rec.json", []byte("whole")))
	require.NoFileExists(t, stale, "a crashed writer's temp file")
	require.FileExists(t, live, "a live writer's temp file")

	clock.Store(int64(time.Hour + time.Minute))
	require.NoError(t, a.PutAtomic(ctx, parquet.StagingDir+"/iot/rec.json", []byte("whole")))
	require.NoFileExists(t, live, "a temp file not written for an hour since the first sweep")
}

// Regression: PutAtomic sweeps only the folder it writes into, so the
// temp files a crash left in a folder nothing writes into again (the
// staging folder of a shard that moved away for good) stayed for ever.
// SweepTemps, which an archive's writer calls as it starts, deletes the
// stale ones in every folder and counts them; a live writer's is kept.
func TestLocalArchiveSweepsStaleTempFilesEverywhere(t *testing.T) {
	dir := t.TempDir()
	a, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	var clock atomic.Int64 // added to the time
	parquet.SetLocalArchiveClock(a, func() time.Time { return time.Now().Add(time.Duration(clock.Load())) })
	gone := filepath.Join(dir, filepath.FromSlash(parquet.StagingPrefix("iot", 7)))
	published := filepath.Join(dir, "iot", "shard-000007")
	var stale, live []string
	for _, folder := range []string{gone, published, dir} {
		require.NoError(t, os.MkdirAll(folder, 0o755))
		s, l := filepath.Join(folder, ".tmp-x-111"), filepath.Join(folder, ".tmp-x-222")
		for _, p := range []string{s, l} {
			require.NoError(t, os.WriteFile(p, []byte("ha"), 0o644))
		}
		stale, live = append(stale, s), append(live, l)
	}
	kept := filepath.Join(gone, "not-a-temp-file")
	require.NoError(t, os.WriteFile(kept, []byte("whole"), 0o644))
	clock.Store(int64(time.Hour + time.Minute)) // the stale ones' hour is up
	for _, p := range live {
		now := time.Now().Add(time.Hour) // a live writer's: written a minute ago
		require.NoError(t, os.Chtimes(p, now, now))
	}

	n, err := a.SweepTemps(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(stale), n, "deleted files counted")
	for _, p := range stale {
		require.NoFileExists(t, p, "a crashed writer's temp file")
	}
	for _, p := range append(live, kept) {
		require.FileExists(t, p)
	}

	// Bounded: past its budget it stops, says so, and deletes no more.
	restore := parquet.SetTempSweepBudget(-1)
	defer restore()
	clock.Store(int64(3 * time.Hour))
	n, err = a.SweepTemps(context.Background())
	require.ErrorContains(t, err, "local archive "+dir+": sweep of stale temp files: stopped after -1ns")
	require.Zero(t, n)
	for _, p := range live {
		require.FileExists(t, p)
	}
}

func TestSkipHidden(t *testing.T) {
	for name, want := range map[string]struct {
		after  string
		hidden bool
	}{
		"iot/shard-000001/00-09-e1.parquet": {"", false},
		"_tflo/staging/iot/rec-1":           {"_tflo/\U0010FFFF", true},
		"iot/_SUCCESS":                      {"iot/_SUCCESS", true},
		"iot/shard-000001/.tmp/part":        {"iot/shard-000001/.tmp/\U0010FFFF", true},
		".DS_Store":                         {".DS_Store", true},
		"iot/shard_1/x.parquet":             {"", false}, // '_' inside an element is not hidden
	} {
		after, hidden := parquet.SkipHidden(name)
		if after != want.after || hidden != want.hidden {
			t.Errorf("SkipHidden(%q) = %q, %v; want %q, %v", name, after, hidden, want.after, want.hidden)
		}
	}
}

// An archive folder that is a symlink (/var/tflo/archive -> /mnt/disk/archive)
// lists the files of the folder it points to. Bug: the walk did not follow
// a symlinked root, so the listing was empty and a backfill of the archive
// replayed nothing and reported success.
func TestLocalArchiveListsThroughASymlinkedFolder(t *testing.T) {
	target := filepath.Join(t.TempDir(), "target")
	w, err := parquet.NewLocalArchive(target)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := "p/shard-000000/x.parquet"
	if err := w.PutAtomic(ctx, name, []byte("whole")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "archive")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	a, err := parquet.NewLocalArchive(link)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != name || got[0].Size != 5 {
		t.Fatalf("list of %s (a symlink to %s) = %+v, want %s", link, target, got, name)
	}
	got, err = a.List(ctx, "p/shard-000000/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != name {
		t.Fatalf("list of %s under p/shard-000000/ = %+v, want %s", link, got, name)
	}
}

// A local archive lists in pages (PageLister), reading only the folders
// that can hold the page, and its pages are those of its full listing,
// in byte order across folders whose names sort around '/'. Bug: it had
// no ListPage, so every page (ListAfter, one per partition for the
// backfill's ListPartitions) walked and stat'ed the whole tree.
func TestLocalArchiveListsInPages(t *testing.T) {
	dir := t.TempDir()
	a, err := parquet.NewLocalArchive(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(a).(parquet.PageLister); !ok {
		t.Fatal("LocalArchive is no PageLister: every ListAfter page lists the whole tree")
	}
	ctx := context.Background()
	names := []string{"a", "iot/shard-000000/x", "iot/shard-000000/x~", "iot/shard-000001/y", "iot-eu/shard-000000/z",
		"iot.b/c", "iot0", "_tflo/staging/r", "z~/q", "é/f"}
	for _, n := range names {
		if err := a.PutAtomic(ctx, n, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	// Not listed: a temp file of an unfinished PutAtomic.
	if err := os.WriteFile(filepath.Join(dir, "iot", "shard-000000", ".tmp-w-1"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	afters := append([]string{"", "iot", "iot/", "iot-", "iot/shard-000000/~", "iot/shard-000000/", "iot/shard-000001", "zz"}, names...)
	for _, prefix := range []string{"", "iot", "iot/", "iot/shard-000000/", "q"} {
		all, err := a.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, after := range afters {
			var want []string
			for _, o := range all {
				if o.Name > after {
					want = append(want, o.Name)
				}
			}
			for _, limit := range []int{1, 2, 1000} {
				page, err := parquet.ListAfter(ctx, a, prefix, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, o := range page {
					got = append(got, o.Name)
					if o.Size != int64(len(o.Name)) {
						t.Fatalf("%s: size %d, want %d", o.Name, o.Size, len(o.Name))
					}
				}
				w := want[:min(len(want), limit)]
				if strings.Join(got, ",") != strings.Join(w, ",") {
					t.Fatalf("ListAfter(prefix %q, after %q, limit %d) = %q, want %q", prefix, after, limit, got, w)
				}
			}
		}
	}
	missing, err := parquet.NewLocalArchive(filepath.Join(t.TempDir(), "gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(missing.Root()); err != nil {
		t.Fatal(err)
	}
	if page, err := parquet.ListAfter(ctx, missing, "", "", 10); err != nil || len(page) != 0 {
		t.Fatalf("ListAfter of a missing folder = %v, %v; want nothing, as List", page, err)
	}
}

// TestArchiveErrorsOfAnEndedContextNameTheObject: every method of the
// local and memory archives, called with a cancelled context, returns an
// error naming the archive, the operation and the object that still
// wraps context.Canceled (the local AbortUpload said "delete"). Bug: all but List returned the bare "context
// canceled", so a writer's or compaction's log said nothing of what was
// given up.
func TestArchiveErrorsOfAnEndedContextNameTheObject(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const name = "p/shard-000001/a.parquet"
	for _, arc := range localAndMemArchives(t) {
		for op, call := range archiveCalls(ctx, name) {
			t.Run(arc.what+"/"+op, func(t *testing.T) {
				err := call(arc.a)
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorContains(t, err, arc.what+": ")
				require.ErrorContains(t, err, name)
				// The operation, "move" for both of Move's names.
				require.ErrorContains(t, err, ": "+strings.TrimSuffix(strings.TrimSuffix(op, " from"), " to")+" ")
			})
		}
	}
	_, err := parquet.NewMemArchive().ListUploads(ctx, "p/")
	require.ErrorIs(t, err, context.Canceled)
	require.EqualError(t, err, `memory archive: list uploads "p/": context canceled`)
}

// TestArchivesRefuseBadNames: every method of the local and memory
// archives that takes an object name refuses one that is not a clean
// relative path, or that names a temp file, with an error naming the
// archive and the name that wraps ErrBadName. Bug: the local archive's
// error did not say which archive, and the memory archive's Open (and
// Move's source, Delete, the upload calls) took any name, so a test on it
// passed a name the local archive refuses.
func TestArchivesRefuseBadNames(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{"", ".", "/abs/a.parquet", "../a.parquet", "p/../a.parquet", "p//a.parquet", "p/", "p/./a.parquet", "p/.tmp-a.parquet"} {
		for _, arc := range localAndMemArchives(t) {
			for op, call := range archiveCalls(ctx, bad) {
				t.Run(arc.what+"/"+op+"/"+bad, func(t *testing.T) {
					err := call(arc.a)
					require.ErrorIs(t, err, parquet.ErrBadName)
					require.ErrorContains(t, err, arc.what+": ")
					require.ErrorContains(t, err, strconv.Quote(bad))
				})
			}
		}
	}
}

// namedArchive is a fullArchive (rolling_test.go) and the name its
// errors start with.
type namedArchive struct {
	what string
	a    fullArchive
}

// localAndMemArchives returns a new local archive (in a temp folder) and
// a new memory archive.
func localAndMemArchives(t *testing.T) []namedArchive {
	dir := t.TempDir()
	local, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	return []namedArchive{{"local archive " + dir, local}, {"memory archive", parquet.NewMemArchive()}}
}

// archiveCalls returns, by operation, a call of every archive method
// that takes an object name, each with name and ctx.
func archiveCalls(ctx context.Context, name string) map[string]func(a fullArchive) error {
	const other = "p/shard-000001/b.parquet"
	return map[string]func(a fullArchive) error{
		"open":          func(a fullArchive) error { _, err := a.Open(ctx, name); return err },
		"put":           func(a fullArchive) error { return a.PutAtomic(ctx, name, []byte("x")) },
		"create upload": func(a fullArchive) error { _, err := a.CreateUpload(ctx, name); return err },
		"upload part 1 of": func(a fullArchive) error {
			_, err := a.UploadPart(ctx, name, "u1", 1, 0, []byte("x"))
			return err
		},
		"complete":     func(a fullArchive) error { return a.CompleteUpload(ctx, name, "u1", nil) },
		"abort upload": func(a fullArchive) error { return a.AbortUpload(ctx, name, "u1") },
		"move from":    func(a fullArchive) error { return a.Move(ctx, name, other) },
		"move to":      func(a fullArchive) error { return a.Move(ctx, other, name) },
		"delete":       func(a fullArchive) error { return a.Delete(ctx, name) },
	}
}

// TestCompactSaysItsTempSweepStoppedAtItsBudget: a compaction whose sweep
// of stale temp files stops at its time budget says so in its result
// (StaleTempSweepStopped, beside the count deleted until then); the next
// compaction, within its budget, deletes the rest. Bug: Compact dropped
// the sweep's error, so a sweep cut short read as one with nothing left.
func TestCompactSaysItsTempSweepStoppedAtItsBudget(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	stale, live := archivetest.StaleTempFiles(t, dir, "iot", 2)
	a, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)

	restore := parquet.SetTempSweepBudget(-1) // stops before the first file
	res, err := parquet.Compact(ctx, a, "", "", parquet.DefaultCompactPolicy(), time.Now())
	restore()
	require.NoError(t, err)
	require.True(t, res.StaleTempSweepStopped, "result %+v", res)
	require.Zero(t, res.StaleTempFiles)
	require.FileExists(t, stale, "left for the next compaction")

	res, err = parquet.Compact(ctx, a, "", "", parquet.DefaultCompactPolicy(), time.Now())
	require.NoError(t, err)
	require.False(t, res.StaleTempSweepStopped, "result %+v", res)
	require.Equal(t, 1, res.StaleTempFiles)
	require.NoFileExists(t, stale)
	require.FileExists(t, live)
}
