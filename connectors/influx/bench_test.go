package influx_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/testsuite/influxtest"
)

const benchBatch = 5000

// rawPost is the baseline: the server's own ceiling for one batch — a
// bare HTTP POST of the same 5000 lines of line protocol to the same v2
// write endpoint, on a server of its own.
func rawPost(b *testing.B) {
	srv := influxtest.Start(b)
	srv.CreateDatabase(b, "bench")
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
	url := srv.URL + "/api/v2/write?bucket=bench/autogen&precision=ns"
	client := &http.Client{}
	for b.Loop() {
		resp, err := client.Post(url, "text/plain; charset=utf-8", strings.NewReader(string(body)))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatalf("raw write: %s", resp.Status)
		}
	}
	b.ReportMetric(float64(benchBatch)*float64(b.N)/b.Elapsed().Seconds(), "points/s")
}

func BenchmarkRawHTTPPost(b *testing.B) { rawPost(b) }

// BenchmarkSinkBatch: one op = Write 5000 points (encoding included) and
// Flush (one request, acknowledged) against a real influxd, beside the raw
// POST of the same lines (x-raw-http-post).
func BenchmarkSinkBatch(b *testing.B) {
	srv := influxtest.Start(b)
	srv.CreateDatabase(b, "bench")
	s, err := influx.NewSink(srv.URL, "bench/autogen", influx.WithBatchSize(benchBatch))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	pts := genPoints("bench", 0, benchBatch)
	ctx := context.Background()
	for b.Loop() {
		if err := s.Write(ctx, pts...); err != nil {
			b.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchBatch)*float64(b.N)/b.Elapsed().Seconds(), "points/s")
	benchratio.Report(b, "raw-http-post", rawPost)
}
