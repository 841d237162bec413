package parquet_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
)

func TestSummarize(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	smallFiles(t, a, 100, 30) // 4 files per shard
	// Staged (unpublished) rows show as staged: on shard 1 beside its
	// files, on shard 7 (whose first file is still open) alone.
	for _, shard := range []int32{1, 7} {
		w, err := parquet.NewRollingWriter(a, "iot", shard, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Restore(ctx, parquet.RestorePoint{Cut: 99, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, rowsAt(100)...); err != nil {
			t.Fatal(err)
		}
		if _, err := w.PreCommit(ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	s, err := parquet.Summarize(ctx, a, "", 4)
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsThrough(100)
	if len(s.Partitions) != 3 || s.Files != 8 || s.Rows != 2*int64(len(rows)) || len(s.Problems) != 0 {
		t.Fatalf("summary %+v", s)
	}
	if p := s.Partitions[2]; p.Shard != 7 || p.Files != 0 || p.Rows != 0 || p.Staged == 0 || p.FirstOffset != -1 {
		t.Fatalf("the shard with an open first file: %+v", p)
	}
	// A prefix of another shard leaves it out.
	if only, err := parquet.Summarize(ctx, a, parquet.ShardPrefix("iot", 7), 4); err != nil || len(only.Partitions) != 1 || only.Partitions[0].Shard != 7 {
		t.Fatalf("summary of shard 7: %+v, %v", only, err)
	}
	for _, p := range s.Partitions[:2] {
		if p.Files != 4 || p.Rows != int64(len(rows)) || p.FirstOffset != 0 || p.LastOffset != 99 {
			t.Fatalf("partition %+v", p)
		}
		if p.MinTS != rows[0].TS || p.MaxTS != rows[len(rows)-1].TS {
			t.Fatalf("partition %d time range %d..%d, want %d..%d", p.Shard, p.MinTS, p.MaxTS, rows[0].TS, rows[len(rows)-1].TS)
		}
		if want := map[int32]int{0: 0, 1: 1}[p.Shard]; p.Staged != want {
			t.Fatalf("partition %d: %d staged objects, want %d", p.Shard, p.Staged, want)
		}
	}
}

// Verify finds what an independent reader would count twice (issue 16.5)
// and names every file that fails a check.
func TestVerify(t *testing.T) {
	ctx := context.Background()
	for _, comp := range []parquet.Compression{parquet.Zstd, parquet.Snappy} {
		t.Run("clean "+comp.String(), func(t *testing.T) {
			a := parquet.NewMemArchive()
			smallFiles(t, a, 200, 25, parquet.WithCompression(comp))
			rep, err := parquet.Verify(ctx, a, "", "", 2)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Files != 16 || rep.Rows != 2*int64(len(rowsThrough(200))) {
				t.Fatalf("report %+v", rep)
			}
		})
	}
	t.Run("duplicates", func(t *testing.T) {
		a := parquet.NewMemArchive()
		smallFiles(t, a, 200, 25)
		w, _ := parquet.NewWriter(a, "iot", 1, 2)
		var replay []parquet.Row
		for off := int64(60); off < 90; off++ {
			replay = append(replay, rowsAt(off)...)
		}
		if _, err := w.WriteFile(ctx, replay); err != nil {
			t.Fatal(err)
		}
		rep, err := parquet.Verify(ctx, a, "", "", 2)
		if err != nil {
			t.Fatal(err)
		}
		// An independent reader, file by file, counts the same duplicates.
		indep := arrowReadArchive(t, a)
		type key struct {
			shard  int32
			off    int64
			signal string
		}
		seen := map[key]int{}
		dups := int64(0)
		for _, r := range indep {
			k := key{r.Shard, r.Offset, r.Signal}
			if seen[k] > 0 {
				dups++
			}
			seen[k]++
		}
		if dups != int64(len(replay)) || rep.DuplicateRows != dups || len(rep.Problems) != 0 {
			t.Fatalf("verify found %d duplicate rows (%d listed), arrow-go %d, the replay holds %d; problems %v",
				rep.DuplicateRows, len(rep.Duplicates), dups, len(replay), rep.Problems)
		}
		d := rep.Duplicates[0]
		if d.Shard != 1 || d.Offset < 60 || d.Offset >= 90 || !strings.Contains(d.Files[1], "e00000000000000000002") {
			t.Fatalf("duplicate %+v", d)
		}
	})
	t.Run("bad files", func(t *testing.T) {
		a := parquet.NewMemArchive()
		smallFiles(t, a, 100, 50)
		objs, _ := a.List(ctx, "iot/shard-000000/")
		// A flipped byte in one file; another file's bytes under a name
		// that claims other offsets.
		data := readObject(t, a, objs[0].Name)
		data[len(data)/2] ^= 0x40
		if err := a.PutAtomic(ctx, objs[0].Name, data); err != nil {
			t.Fatal(err)
		}
		moved := parquet.FileKey{Pipeline: "iot", Shard: 7, Epoch: 1, First: 500, Last: 549}.Name()
		if err := a.PutAtomic(ctx, moved, readObject(t, a, objs[1].Name)); err != nil {
			t.Fatal(err)
		}
		rep, err := parquet.Verify(ctx, a, "", "", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[0], objs[0].Name) || !strings.Contains(rep.Problems[0], "checksum") ||
			!strings.Contains(strings.Join(rep.Problems, "\n"), moved+": row 0 has offset 50 outside the name's range 500-549") {
			t.Fatalf("problems: %q", rep.Problems)
		}
	})
}

func readObject(t testing.TB, a parquet.Archive, name string) []byte {
	t.Helper()
	o, err := a.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(io.NewSectionReader(o, 0, o.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Summarize names each shard's codecs from the files' footers: one
// codec, or both where the writer's compression changed.
func TestSummarizeCodecs(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	smallFiles(t, a, 40, 10) // shards 0 and 1, zstd
	for _, shard := range []int32{1, 2} {
		w, err := parquet.NewWriter(a, "iot", shard, 2, parquet.WithCompression(parquet.Snappy))
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(40); off < 60; off++ {
			if err := w.Append(ctx, rowsAt(off)...); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, err := parquet.Summarize(ctx, a, "", 4)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32][]string{}
	for _, p := range s.Partitions {
		got[p.Shard] = p.Codecs
	}
	want := map[int32][]string{0: {"zstd"}, 1: {"snappy", "zstd"}, 2: {"snappy"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("codecs by shard %v, want %v", got, want)
	}
}

// Event times at or before 1970 (0, negative) bound a shard's time range
// like any other: 0 is not taken for "no file yet".
func TestSummarizeTimeRangeAtAndBeforeTheEpoch(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	w, err := parquet.NewWriter(a, "iot", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range [][]parquet.Row{
		{{Sensor: "s", Signal: "v", TS: -30, Offset: 0}, {Sensor: "s", Signal: "v", TS: -20, Offset: 1}},
		{{Sensor: "s", Signal: "v", TS: -10, Offset: 2}},
	} {
		if _, err := w.WriteFile(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	w1, err := parquet.NewWriter(a, "iot", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range [][]parquet.Row{
		{{Sensor: "s", Signal: "v", TS: 0, Offset: 0}},
		{{Sensor: "s", Signal: "v", TS: 5, Offset: 1}},
	} {
		if _, err := w1.WriteFile(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	s, err := parquet.Summarize(ctx, a, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Partitions) != 2 {
		t.Fatalf("summary %+v", s)
	}
	for i, want := range [][2]int64{{-30, -10}, {0, 5}} {
		if p := s.Partitions[i]; p.MinTS != want[0] || p.MaxTS != want[1] {
			t.Errorf("shard %d time range %d..%d, want %d..%d", p.Shard, p.MinTS, p.MaxTS, want[0], want[1])
		}
	}
	if s.MinTS != -30 || s.MaxTS != 5 {
		t.Errorf("archive time range %d..%d, want -30..5", s.MinTS, s.MaxTS)
	}
}

// TestArchiveListingErrorsNameTheArchiveAndPrefix: a failed listing was
// reported as `summarize: list "" after "": …`, naming neither the
// archive nor, in words, what was listed. The error says which files
// were listed, under which prefix, and the archive's folder — once: the
// local archive's own error repeated `list "iot/" after ""` after the
// words, and the memory archive's did not name the archive. A backfill's
// partition listing (ListAfter, unwrapped by its activity) says the same.
func TestArchiveListingErrorsNameTheArchiveAndPrefix(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "archive")
	a, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	// The archive's folder replaced by a file: every listing fails.
	require.NoError(t, os.Remove(dir))
	require.NoError(t, os.WriteFile(dir, []byte("x"), 0o600))
	problem := "local archive " + dir + ": open " + dir + ": not a directory"
	_, err = parquet.Summarize(ctx, a, "", 1)
	require.EqualError(t, err, "summarize the archive: list the archive's files: "+problem)
	_, err = parquet.Verify(ctx, a, "iot/", "", 1)
	require.EqualError(t, err, `verify the archive: list the archive's files under "iot/": `+problem)
	_, err = parquet.ListAfter(ctx, a, "iot/", "iot/shard-000001/~", 1)
	require.EqualError(t, err, `list the archive's files under "iot/" after "iot/shard-000001/~": `+problem)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = parquet.Verify(canceled, parquet.NewMemArchive(), "iot/", "", 1)
	require.EqualError(t, err, `verify the archive: list the archive's files under "iot/": memory archive: context canceled`)
}
