package worker

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/internal/devstack"
)

// The backfill benchmark: 1M archived rows (4 partitions of 250,000, as a
// rolling writer leaves them: one large file each) replayed into a real
// influxd, against the same rows read by a plain parquet-go loop and
// posted as raw line protocol, in the same process.
const (
	benchRowsPerPartition = 250_000
	benchPartitions       = 4
	benchPlainBatch       = 20_000
)

type backfillFixture struct {
	influx *devstack.Influx
	dir    string
	arc    *parquet.LocalArchive
	err    error
}

var (
	fixtureOnce sync.Once
	fixture     backfillFixture
)

// benchFixture starts influxd and writes the archive once per process
// (TestMain stops it).
func benchFixture(b *testing.B) *backfillFixture {
	fixtureOnce.Do(func() {
		f := &fixture
		if f.dir, f.err = os.MkdirTemp("", "tflo-backfill-bench-"); f.err != nil {
			return
		}
		if f.influx, f.err = devstack.StartInflux(context.Background(), devstack.InfluxOptions{Dir: f.dir + "/influx"}); f.err != nil {
			return
		}
		if f.arc, f.err = parquet.NewLocalArchive(f.dir + "/archive"); f.err != nil {
			return
		}
		ctx := context.Background()
		for shard := range int32(benchPartitions) {
			w, err := parquet.NewRollingWriter(f.arc, "iot-portal", shard, 1)
			if err != nil {
				f.err = err
				return
			}
			if _, err := w.Restore(ctx, parquet.RestorePoint{Cut: -1}); err != nil {
				f.err = err
				return
			}
			rows := archiveRows(shard, benchRowsPerPartition/3)
			for i := 0; i < len(rows); i += 3000 {
				if err := w.Append(ctx, rows[i:min(i+3000, len(rows))]...); err != nil {
					f.err = err
					return
				}
			}
			w.Roll()
			last := rows[len(rows)-1].Offset
			if _, err := w.PreCommit(ctx, last); err != nil {
				f.err = err
				return
			}
			if _, err := w.Commit(ctx, last); err != nil {
				f.err = err
				return
			}
		}
		for _, db := range []string{"bench_plain", "bench_tflo"} {
			if f.err = f.influx.CreateDatabase(ctx, db); f.err != nil {
				return
			}
		}
	})
	if fixture.err != nil {
		b.Skipf("backfill benchmark fixture: %v", fixture.err)
	}
	return &fixture
}

func TestMain(m *testing.M) {
	flag.Parse()
	benchratio.Baselines{"BenchmarkBackfillInflux": {"plain-parquet-lp-post": plainBackfill}}.Measure()
	code := m.Run()
	if fixture.influx != nil {
		_ = fixture.influx.Close()
	}
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// plainBackfill is the baseline: every file read with parquet-go's
// GenericReader (no checks), each row turned into a line-protocol line,
// lines POSTed to /write in batches of 20,000, one request at a time.
func plainBackfill(b *testing.B) {
	f := benchFixture(b)
	ctx := context.Background()
	objs, err := f.arc.List(ctx, "iot-portal/")
	if err != nil {
		b.Fatal(err)
	}
	url := f.influx.URL + "/write?db=bench_plain&precision=ns"
	rows := make([]parquet.Row, 4096)
	var body []byte
	post := func() {
		resp, err := http.Post(url, "text/plain", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b.Fatalf("influx answered %s", resp.Status)
		}
		body = body[:0]
	}
	n := 0
	for b.Loop() {
		n = 0
		for _, o := range objs {
			fh, err := os.Open(f.arc.Root() + "/" + o.Name)
			if err != nil {
				b.Fatal(err)
			}
			r := pq.NewGenericReader[parquet.Row](fh)
			lines := 0
			for {
				k, err := r.Read(rows)
				for _, row := range rows[:k] {
					body = append(body, row.Signal...)
					body = append(body, ",sensor="...)
					body = append(body, row.Sensor...)
					body = append(body, " value="...)
					body = strconv.AppendFloat(body, row.Value, 'g', -1, 64)
					body = append(body, ' ')
					body = strconv.AppendInt(body, row.TS, 10)
					body = append(body, '\n')
					lines++
					n++
					if lines == benchPlainBatch {
						post()
						lines = 0
					}
				}
				if err != nil {
					break
				}
			}
			if lines > 0 {
				post()
			}
			r.Close()
			fh.Close()
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkPlainParquetLineProtocol(b *testing.B) { plainBackfill(b) }

// BenchmarkBackfillInflux replays the archive with the ReplayPartition
// activity (checked reads, batches, heartbeats) into influxd through the
// BackfillWorker's Influx sink: partitions one after another, and
// Window=4 partitions at once as the workflow runs them.
func BenchmarkBackfillInflux(b *testing.B) {
	for _, window := range []int{1, benchPartitions} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			f := benchFixture(b)
			bw := &BackfillWorker{URL: f.influx.URL}
			acts := &activities.Backfills{Sinks: bw.sink}
			var suite testsuite.WorkflowTestSuite
			suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
			rows := int64(0)
			for b.Loop() {
				rows = 0
				var mu sync.Mutex
				var wg sync.WaitGroup
				sem := make(chan struct{}, window)
				for shard := range int32(benchPartitions) {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer func() { <-sem; wg.Done() }()
						env := suite.NewTestActivityEnvironment()
						env.RegisterActivity(acts)
						v, err := env.ExecuteActivity(acts.ReplayPartition, activities.ReplayPartitionInput{
							Location: "file://" + f.arc.Root(), Partition: parquet.ShardPrefix("iot-portal", shard), Sink: InfluxSinkName("bench_tflo/autogen"),
						})
						if err != nil {
							b.Error(err)
							return
						}
						var res activities.ReplayPartitionResult
						if err := v.Get(&res); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						rows += res.Written
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			bw.Close(context.Background())
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			benchratio.Report(b, "plain-parquet-lp-post", plainBackfill)
		})
	}
}
