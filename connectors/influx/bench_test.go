package influx_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/internal/benchratio"
)

const benchBatch = 5000

// rawPost is the baseline: the server's own ceiling for one batch — a
// bare HTTP POST of the same 5000 lines of line protocol to the same v2
// write endpoint, on a server of its own.
func rawPost(b *testing.B) {
	srv := sharedServer(b)
	srv.CreateDatabase(b, "bench")
	post := newRawPoster(b, srv.URL)
	for b.Loop() {
		post()
	}
	b.ReportMetric(float64(benchBatch)*float64(b.N)/b.Elapsed().Seconds(), "points/s")
}

// newRawPoster returns a function that POSTs the benchmark batch as line
// protocol to the v2 write endpoint with a bare net/http client.
func newRawPoster(b *testing.B, base string) func() {
	var body []byte
	for i, p := range genPoints("bench", 0, benchBatch) {
		if i > 0 {
			body = append(body, '\n')
		}
		var err error
		if body, err = influx.AppendLine(body, p); err != nil {
			b.Fatal(err)
		}
	}
	url := base + "/api/v2/write?bucket=bench/autogen&precision=ns"
	client := &http.Client{}
	return func() {
		resp, err := client.Post(url, "text/plain; charset=utf-8", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatalf("raw write: %s", resp.Status)
		}
	}
}

func BenchmarkRawHTTPPost(b *testing.B) { rawPost(b) }

// BenchmarkSinkBatch: one op = Write 5000 points (encoding included) and
// Flush (one request, acknowledged) against a real influxd, beside the raw
// POST of the same lines: x-raw-http-post against the baseline measured
// before the benchmarks, x-raw-http-post-paired against raw POSTs
// interleaved with the sink's batches (same server, same moment — the
// figure to trust on a busy machine).
func BenchmarkSinkBatch(b *testing.B) {
	srv := sharedServer(b)
	srv.CreateDatabase(b, "bench")
	s, err := influx.NewSink(srv.URL, "bench/autogen", influx.WithBatchSize(benchBatch))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	pts := genPoints("bench", 0, benchBatch)
	post := newRawPoster(b, srv.URL)
	ctx := context.Background()
	var raw time.Duration
	for b.Loop() {
		if err := s.Write(ctx, pts...); err != nil {
			b.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		t0 := time.Now()
		post()
		raw += time.Since(t0)
		b.StartTimer()
	}
	b.ReportMetric(float64(benchBatch)*float64(b.N)/b.Elapsed().Seconds(), "points/s")
	if raw > 0 {
		b.ReportMetric(float64(b.Elapsed())/float64(raw), "x-raw-http-post-paired")
	}
	benchratio.Report(b, "raw-http-post", rawPost)
}
