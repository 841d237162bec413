package parquet_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/benchratio"
)

const benchRows = 100_000

var benchData = sync.OnceValue(func() []parquet.Row { return genRows(7, 0, benchRows) })

// plainWrite is the baseline: a plain parquet-go loop writing the same
// rows with the same codec and row-group size into memory.
func plainWrite(b *testing.B) {
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		w := pq.NewGenericWriter[parquet.Row](&buf, pq.Compression(&zstd.Codec{}), pq.MaxRowsPerRowGroup(16384))
		if _, err := w.Write(benchData()); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkArchiveWrite writes 100k rows as one archive file (into a
// memory archive: encoding, naming, fingerprint, order check) beside the
// plain parquet-go loop.
func BenchmarkArchiveWrite(b *testing.B) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	w, err := parquet.NewWriter(a, "bench", 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := w.WriteFile(ctx, benchData()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	benchratio.Report(b, "plain-parquet-go-write", plainWrite)
}

func BenchmarkPlainParquetWrite(b *testing.B) { plainWrite(b) }

func encodedBenchFile(b *testing.B) (*parquet.MemArchive, []byte) {
	a := parquet.NewMemArchive()
	w, err := parquet.NewWriter(a, "bench", 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	k, err := w.WriteFile(context.Background(), benchData())
	if err != nil {
		b.Fatal(err)
	}
	o, err := a.Open(context.Background(), k.Name())
	if err != nil {
		b.Fatal(err)
	}
	data, _ := io.ReadAll(io.NewSectionReader(o, 0, o.Size()))
	return a, data
}

// plainRead is the baseline: a plain parquet-go GenericReader loop over
// the same file in memory.
func plainRead(b *testing.B) {
	_, data := encodedBenchFile(b)
	rows := make([]parquet.Row, 1024)
	for b.Loop() {
		r := pq.NewGenericReader[parquet.Row](bytes.NewReader(data))
		n := 0
		for {
			k, err := r.Read(rows)
			n += k
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		r.Close()
		if n != benchRows {
			b.Fatalf("read %d rows", n)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkArchiveRead reads the 100k-row file through the archive Reader
// (plan, fingerprint checks, row groups one at a time, positions) beside
// the plain parquet-go loop.
func BenchmarkArchiveRead(b *testing.B) {
	a, _ := encodedBenchFile(b)
	r, err := parquet.NewReader(a, "bench/")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		n := 0
		for _, err := range r.All(ctx, parquet.Position{}) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != benchRows {
			b.Fatalf("read %d rows", n)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	benchratio.Report(b, "plain-parquet-go-read", plainRead)
}

func BenchmarkPlainParquetRead(b *testing.B) { plainRead(b) }
