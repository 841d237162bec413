package parquet_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// An independent implementation (Apache Arrow's Go Parquet reader) must
// open the archive files, see the fingerprint and schema, and read back the
// same rows the writer was given.
func TestArrowReadsArchiveFiles(t *testing.T) {
	ctx := context.Background()
	a, err := parquet.NewLocalArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := parquet.NewWriter(a, "iot", 5, 3, parquet.WithRowGroupRows(100))
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

	got := make([]parquet.Row, 0, len(rows))
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
	equalRows(t, got, rows)
}
