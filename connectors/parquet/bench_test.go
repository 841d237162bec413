package parquet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
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

// BenchmarkRollingFilesPerPartitionHour models the demo: a partition
// receiving about 9 archived rows per 5-second checkpoint (a 4-minute
// `make demo` left 2,156 rows in 240 files), for one hour of a fake
// clock, through the pipeline's archive sink (Sink: Restore, Write, and
// per checkpoint MarkCut, Flush, Commit, as the runtime calls them). It
// reports the files a partition publishes per hour (default 15-minute
// age, 128 MiB) against the writer the sink replaced, which wrote one file
// per checkpoint, measured in the same run (target: at most 4, against
// 720).
func BenchmarkRollingFilesPerPartitionHour(b *testing.B) {
	ctx := context.Background()
	const interval, rowsPerCheckpoint = 5 * time.Second, 9
	shard := streaming.KafkaShard("signals", 0)
	var rolling, perCheckpoint float64
	for b.Loop() {
		clock := &fakeClock{}
		a := parquet.NewMemArchive()
		s, err := parquet.NewSink(a, "iot", parquet.WithClock(clock.Now))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Restore(ctx, shard, 1, streaming.RestoredCut{Offset: -1}); err != nil {
			b.Fatal(err)
		}
		old := parquet.NewMemArchive()
		ow, err := parquet.NewWriter(old, "iot", 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		files, oldFiles := 0, 0
		off := int64(0)
		id := streaming.CheckpointID(0)
		for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += interval {
			for range rowsPerCheckpoint {
				rows := rowsAt(off)
				outs := make([]streaming.Output, len(rows))
				for i, r := range rows {
					outs[i] = r.Output()
					outs[i].Shard, outs[i].Epoch = shard, 1
				}
				if err := s.Write(ctx, outs); err != nil {
					b.Fatal(err)
				}
				if err := ow.Append(ctx, rows...); err != nil {
					b.Fatal(err)
				}
				off++
			}
			clock.Advance(interval)
			id++
			s.MarkCut(shard, off-1)
			if err := s.Flush(ctx, shard, id); err != nil {
				b.Fatal(err)
			}
			st, err := s.CommitCheckpoint(ctx, shard, id)
			if err != nil {
				b.Fatal(err)
			}
			files += len(st.Files)
			if _, ok, err := ow.Flush(ctx); err != nil {
				b.Fatal(err)
			} else if ok {
				oldFiles++
			}
		}
		rolling, perCheckpoint = float64(files), float64(oldFiles)
	}
	b.ReportMetric(rolling, "files/partition-hour")
	b.ReportMetric(perCheckpoint, "baseline-files/partition-hour")
	b.ReportMetric(rolling/perCheckpoint, "x-one-file-per-checkpoint")
}

// BenchmarkRollingPreCommit measures what a checkpoint's pre-commit costs
// over the life of one file open across n checkpoints (1 s checkpoints:
// n=60 is a minute, n=900 the default 15-minute file), a row group added
// at each: an op is the file's n checkpoints (Append of 64 offsets,
// PreCommit, Commit, into a memory archive), for the writer (row-group
// segments) and, in alternation in the same loop, for the baseline
// writing every row group into every record (WithInlineRowGroups, the
// format before segments). It reports each one's time and archive bytes
// per pre-commit (the part, the segment and the record) and the ratio
// x-inline (segments' time over the baseline's; below 1 is cheaper).
func BenchmarkRollingPreCommit(b *testing.B) {
	for _, n := range []int{60, 300, 900} {
		b.Run(fmt.Sprintf("checkpoints=%d", n), func(b *testing.B) {
			ctx := context.Background()
			life := func(opts ...parquet.WriterOption) (time.Duration, int64) {
				w := freshWriter(b, parquet.NewMemArchive(), "bench", 0, 1,
					append([]parquet.WriterOption{parquet.WithRowGroupRows(64), parquet.WithMaxFileAge(time.Hour)}, opts...)...)
				var spent time.Duration
				var bytes int64
				off := int64(0)
				for range n {
					for range 64 {
						if err := w.Append(ctx, rowsAt(off)...); err != nil {
							b.Fatal(err)
						}
						off++
					}
					t0 := time.Now()
					cs, err := w.PreCommit(ctx, off-1)
					if err != nil {
						b.Fatal(err)
					}
					spent += time.Since(t0)
					bytes += cs.Bytes
					if _, err := w.Commit(ctx, off-1); err != nil {
						b.Fatal(err)
					}
				}
				return spent, bytes
			}
			var seg, inl time.Duration
			var segBytes, inlBytes int64
			for b.Loop() {
				t, by := life()
				seg, segBytes = seg+t, segBytes+by
				t, by = life(parquet.WithInlineRowGroups())
				inl, inlBytes = inl+t, inlBytes+by
			}
			pcs := float64(b.N * n)
			b.ReportMetric(float64(seg.Nanoseconds())/pcs, "ns/pre-commit")
			b.ReportMetric(float64(inl.Nanoseconds())/pcs, "inline-ns/pre-commit")
			b.ReportMetric(float64(segBytes)/pcs, "bytes/pre-commit")
			b.ReportMetric(float64(inlBytes)/pcs, "inline-bytes/pre-commit")
			b.ReportMetric(float64(seg)/float64(inl), "x-inline")
		})
	}
}

// BenchmarkRollingCompression appends the 100k benchmark rows to a
// RollingWriter (a memory archive, a pre-commit every 10k rows, then a
// roll and a commit; a cut never splits an offset's rows) with zstd at
// level 1, zstd at the default level 3, and snappy, in turn in the same
// loop (the first of each round rotating): CPU time and archive bytes per
// row of each, and each one's time over level 3's (x-level3).
func BenchmarkRollingCompression(b *testing.B) {
	ctx := context.Background()
	rows := benchData()
	run := func(opts ...parquet.WriterOption) (time.Duration, int64) {
		w := freshWriter(b, parquet.NewMemArchive(), "bench", 0, 1, opts...)
		t0 := time.Now()
		for i := 0; i < len(rows); i += 8 {
			batch := rows[i:min(i+8, len(rows))]
			if err := w.Append(ctx, batch...); err != nil {
				b.Fatal(err)
			}
			cut := batch[len(batch)-1].Offset
			if (i+8)%10_000 < 8 && i+8 < len(rows) && rows[i+8].Offset > cut {
				if _, err := w.PreCommit(ctx, cut); err != nil {
					b.Fatal(err)
				}
			}
		}
		w.Roll()
		last := rows[len(rows)-1].Offset
		if _, err := w.PreCommit(ctx, last); err != nil {
			b.Fatal(err)
		}
		st, err := w.Commit(ctx, last)
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0), st.FileBytes
	}
	codecs := []struct {
		name string
		opts []parquet.WriterOption
	}{
		{"level1", []parquet.WriterOption{parquet.WithZstdLevel(1)}},
		{"level3", nil},
		{"snappy", []parquet.WriterOption{parquet.WithCompression(parquet.Snappy)}},
	}
	t := make([]time.Duration, len(codecs))
	n := make([]int64, len(codecs))
	for i := 0; b.Loop(); i++ {
		for k := range codecs {
			c := (i + k) % len(codecs)
			d, size := run(codecs[c].opts...)
			t[c], n[c] = t[c]+d, n[c]+size
		}
	}
	rowsRun := float64(b.N * len(rows))
	for c, codec := range codecs {
		b.ReportMetric(float64(t[c].Nanoseconds())/rowsRun, codec.name+"-ns/row")
		b.ReportMetric(float64(n[c])/rowsRun, codec.name+"-file-bytes/row")
		if codec.name != "level3" {
			b.ReportMetric(float64(t[c])/float64(t[1]), "x-level3-"+codec.name)
		}
	}
}

// pipelineRows are n rows shaped like BenchmarkSMASpecArchive's outputs
// (pipeline/bench_test.go): 1000 sensors in turn, one "sma" signal per
// reading, millisecond event times, smooth values rounded to 3 decimals.
func pipelineRows(n int) []parquet.Row {
	sensors := make([]string, 1000)
	for i := range sensors {
		sensors[i] = fmt.Sprintf("s-%04d", i)
	}
	rows := make([]parquet.Row, n)
	for i := range rows {
		s, seq := i%len(sensors), i/len(sensors)
		rows[i] = parquet.Row{
			Sensor: sensors[s], Signal: "sma", TS: (1_700_000_000_000 + int64(seq)*1000) * 1e6,
			Value: math.Round((22.5+9*math.Sin(float64(seq)/6+float64(s)))*1000) / 1000, Offset: int64(i),
		}
	}
	return rows
}

// BenchmarkRollingAppend is the archive's steady state on a pipeline's
// hot path: one long-lived RollingWriter (a memory archive) taking rows
// shaped like the SMA job's outputs in batches of 100, a pre-commit and a
// commit every 50k rows. An op is one row. It reports the process's CPU
// time per row (cpu-ns/row, the garbage collector's included), the file
// bytes per row of what it published, and x-cpu-plain: that CPU time over
// the CPU time per row of a plain parquet-go GenericWriter writing the
// same rows (zstd, 16384-row row groups) in the same run.
func BenchmarkRollingAppend(b *testing.B) {
	ctx := context.Background()
	rows := pipelineRows(1 << 20)
	w := freshWriter(b, parquet.NewMemArchive(), "bench", 0, 1)
	var fileBytes, fileRows int64
	off := int64(0)
	c0 := benchratio.CPUTime()
	for n := 0; n < b.N; {
		k := min(100, b.N-n)
		batch := make([]parquet.Row, 0, 100)
		for j := range k {
			r := rows[(n+j)%len(rows)]
			r.Offset = off + int64(j)
			batch = append(batch, r)
		}
		if err := w.Append(ctx, batch...); err != nil {
			b.Fatal(err)
		}
		n += k
		off += int64(k)
		if n%50_000 < k || n == b.N {
			if n == b.N {
				w.Roll()
			}
			if _, err := w.PreCommit(ctx, off-1); err != nil {
				b.Fatal(err)
			}
			st, err := w.Commit(ctx, off-1)
			if err != nil {
				b.Fatal(err)
			}
			fileBytes, fileRows = fileBytes+st.FileBytes, fileRows+st.FileRows
		}
	}
	cpu := float64(benchratio.CPUTime() - c0)
	b.StopTimer()
	var buf bytes.Buffer
	c1 := benchratio.CPUTime()
	for i := 0; i < b.N; i += len(rows) {
		buf.Reset()
		pw := pq.NewGenericWriter[parquet.Row](&buf, pq.Compression(&zstd.Codec{}), pq.MaxRowsPerRowGroup(16384))
		if _, err := pw.Write(rows[:min(len(rows), b.N-i)]); err != nil {
			b.Fatal(err)
		}
		if err := pw.Close(); err != nil {
			b.Fatal(err)
		}
	}
	plain := float64(benchratio.CPUTime() - c1)
	b.ReportMetric(cpu/float64(b.N), "cpu-ns/row")
	b.ReportMetric(plain/float64(b.N), "plain-cpu-ns/row")
	b.ReportMetric(cpu/plain, "x-cpu-plain")
	if fileRows > 0 {
		b.ReportMetric(float64(fileBytes)/float64(fileRows), "file-bytes/row")
	}
}
