package parquet_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
)

// An independent implementation (Apache Arrow's Go Parquet reader) must
// open the archive files, see the fingerprint and schema, and read back the
// same rows the writer was given.
func TestArrowReadsArchiveFiles(t *testing.T) {
	for _, c := range []struct {
		comp  parquet.Compression
		codec compress.Compression
	}{{parquet.Zstd, compress.Codecs.Zstd}, {parquet.Snappy, compress.Codecs.Snappy}} {
		t.Run(c.comp.String(), func(t *testing.T) { testArrowReadsArchiveFiles(t, c.comp, c.codec) })
	}
}

func testArrowReadsArchiveFiles(t *testing.T, comp parquet.Compression, codec compress.Compression) {
	ctx := context.Background()
	a, err := parquet.NewLocalArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := parquet.NewWriter(a, "iot", 5, 3, parquet.WithRowGroupRows(100), parquet.WithCompression(comp))
	if err != nil {
		t.Fatal(err)
	}
	rows := genRows(42, 1000, 1234)
	key, err := w.WriteFile(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	o, err := a.Open(ctx, key.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	data, err := io.ReadAll(io.NewSectionReader(o, 0, o.Size()))
	if err != nil {
		t.Fatal(err)
	}

	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("arrow-go cannot open %s: %v", key.Name(), err)
	}
	defer pf.Close()
	fp := pf.MetaData().KeyValueMetadata().FindValue(parquet.FingerprintKey)
	if fp == nil || *fp != parquet.SchemaFingerprint() {
		t.Fatalf("arrow-go sees fingerprint %v, want %s", fp, parquet.SchemaFingerprint())
	}
	if got, want := pf.NumRowGroups(), 13; got != want {
		t.Fatalf("arrow-go sees %d row groups, want %d", got, want)
	}
	for i := range pf.MetaData().NumColumns() {
		cc, err := pf.MetaData().RowGroup(0).ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if cc.Compression() != codec {
			t.Fatalf("arrow-go sees column %d compressed %v, want %v", i, cc.Compression(), codec)
		}
	}

	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 256}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != int64(len(rows)) {
		t.Fatalf("arrow-go reads %d rows, want %d", tbl.NumRows(), len(rows))
	}
	sch := tbl.Schema()
	wantTypes := map[string]arrow.Type{"sensor": arrow.STRING, "signal": arrow.STRING, "ts": arrow.TIMESTAMP, "mode": arrow.INT32, "value": arrow.FLOAT64, "offset": arrow.INT64}
	for name, typ := range wantTypes {
		idx := sch.FieldIndices(name)
		if len(idx) != 1 {
			t.Fatalf("arrow schema %v has no column %q", sch, name)
		}
		if got := sch.Field(idx[0]).Type.ID(); got != typ {
			t.Fatalf("column %q has arrow type %v, want %v", name, got, typ)
		}
	}
	if ts := sch.Field(sch.FieldIndices("ts")[0]).Type.(*arrow.TimestampType); ts.Unit != arrow.Nanosecond {
		t.Fatalf("ts unit %v, want nanoseconds", ts.Unit)
	}

	equalRows(t, archivetest.TableRows(tbl), rows)
}

// arrowReadArchive reads every visible file of a with arrow-go, file by
// file (no de-duplication).
func arrowReadArchive(t testing.TB, a parquet.Archive) []fileRow {
	t.Helper()
	var rows []fileRow
	for _, r := range archivetest.ReadIndependently(t, a, "") {
		rows = append(rows, fileRow{r.Shard, r.Row})
	}
	return rows
}

// Files a RollingWriter assembles from row groups encoded at different
// times, uploaded in parts and finished with a footer of its own must be
// ordinary Parquet to an independent reader, with no row twice. The
// first writer compresses with snappy and the next owner, which finishes
// its open file and goes on, with zstd: one archive, both codecs.
func TestArrowReadsRolledFiles(t *testing.T) {
	ctx := context.Background()
	a, err := parquet.NewLocalArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := freshWriter(t, a, "iot", 1, 2, parquet.WithTargetFileSize(20<<10), parquet.WithRowGroupRows(300), parquet.WithPartSize(3000),
		parquet.WithCompression(parquet.Snappy))
	const n = 6000
	for off := int64(0); off < n; off++ {
		if err := w.Append(ctx, rowsAt(off)...); err != nil {
			t.Fatal(err)
		}
		if off%97 == 0 {
			mustCommit(t, w, off)
		}
	}
	w.Roll()
	mustCommit(t, w, n-1)
	// A crash with an open file: the next owner finishes it.
	for off := int64(n); off < n+500; off++ {
		if err := w.Append(ctx, rowsAt(off)...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.PreCommit(ctx, n+499); err != nil {
		t.Fatal(err)
	}
	next, err := parquet.NewRollingWriter(a, "iot", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.Restore(ctx, parquet.RestorePoint{Cut: n + 499, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, arrowReadArchive(t, a), map[int32][]parquet.Row{1: rowsThrough(n + 500)})
	// The next owner goes on, in its own codec, in a file of its own.
	for off := int64(n + 500); off < n+1000; off++ {
		if err := next.Append(ctx, rowsAt(off)...); err != nil {
			t.Fatal(err)
		}
	}
	next.Roll()
	mustCommit(t, next, n+999)
	exactlyOnce(t, arrowReadArchive(t, a), map[int32][]parquet.Row{1: rowsThrough(n + 1000)})
	codecs := map[format.CompressionCodec]int{}
	names, err := a.List(ctx, "iot/")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range names {
		for _, rg := range openPQ(t, a, fi.Name).Metadata().RowGroups {
			codecs[rg.Columns[0].MetaData.Codec]++
		}
	}
	if codecs[format.Snappy] == 0 || codecs[format.Zstd] == 0 {
		t.Fatalf("row groups by codec: %v, want both snappy's and zstd's", codecs)
	}
}
