package archivetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// FileRow is one row as an independent reader sees it: the file it is in
// and that file's shard.
type FileRow struct {
	File  string
	Shard int32
	parquet.Row
}

// ReadIndependently reads every published archive file under prefix
// ("" for all) with Apache Arrow's Go Parquet reader, file by file and
// without de-duplication, as Spark or DuckDB over a glob would: the
// working objects under parquet.StagingDir are skipped, every other name
// must be a parquet.FileKey name, and every file must carry this build's
// schema fingerprint. Rows come in file-name order.
func ReadIndependently(t testing.TB, a parquet.Archive, prefix string) []FileRow {
	t.Helper()
	ctx := context.Background()
	objs, err := a.List(ctx, prefix)
	if err != nil {
		t.Fatalf("list archive %q: %v", prefix, err)
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Name < objs[j].Name })
	var rows []FileRow
	for _, o := range objs {
		if strings.HasPrefix(o.Name, parquet.StagingDir+"/") {
			continue
		}
		k, err := parquet.ParseFileName(o.Name)
		if err != nil {
			t.Fatalf("archive object %s: %v", o.Name, err)
		}
		for _, r := range arrowRead(t, a, o.Name) {
			rows = append(rows, FileRow{File: o.Name, Shard: k.Shard, Row: r})
		}
	}
	return rows
}

// Duplicates describes every (shard, offset, signal) that rows hold more
// than once, naming the files (none: each row is read once).
func Duplicates(rows []FileRow) []string {
	type key struct {
		shard  int32
		off    int64
		signal string
	}
	first := map[key]string{}
	var out []string
	for _, r := range rows {
		k := key{r.Shard, r.Offset, r.Signal}
		if f, dup := first[k]; dup {
			out = append(out, fmt.Sprintf("shard %d offset %d signal %s: in %s and %s", r.Shard, r.Offset, r.Signal, f, r.File))
			continue
		}
		first[k] = r.File
	}
	return out
}

// arrowRead reads one whole archive file with arrow-go.
func arrowRead(t testing.TB, a parquet.Archive, name string) []parquet.Row {
	t.Helper()
	ctx := context.Background()
	o, err := a.Open(ctx, name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	data, err := io.ReadAll(io.NewSectionReader(o, 0, o.Size()))
	_ = o.Close()
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("arrow-go cannot open %s: %v", name, err)
	}
	defer pf.Close()
	fp := pf.MetaData().KeyValueMetadata().FindValue(parquet.FingerprintKey)
	if fp == nil || *fp != parquet.SchemaFingerprint() {
		t.Fatalf("arrow-go sees fingerprint %v in %s, want %s", fp, name, parquet.SchemaFingerprint())
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 512}, memory.DefaultAllocator)
	if err != nil {
		t.Fatalf("arrow-go reader of %s: %v", name, err)
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil {
		t.Fatalf("arrow-go cannot read %s: %v", name, err)
	}
	defer tbl.Release()
	return TableRows(tbl)
}

// TableRows converts an arrow table of the archive's schema to rows.
func TableRows(tbl arrow.Table) []parquet.Row {
	got := make([]parquet.Row, 0, tbl.NumRows())
	tr := array.NewTableReader(tbl, 300)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
		sensor := col("sensor").(*array.String)
		signal := col("signal").(*array.String)
		ts := col("ts").(*array.Timestamp)
		mode := col("mode").(*array.Int32)
		value := col("value").(*array.Float64)
		offset := col("offset").(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			got = append(got, parquet.Row{
				Sensor: sensor.Value(i), Signal: signal.Value(i), TS: int64(ts.Value(i)),
				Mode: mode.Value(i), Value: value.Value(i), Offset: offset.Value(i),
			})
		}
	}
	return got
}
