package worker

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/influxtest"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workers/pipelines"
	"github.com/tflo-io/tflo/workflows"
)

// The central pipeline's outputs (workers/pipelines/iot-portal-central.yaml).
const (
	signalMean    = "mean"
	signalMin     = "min"
	signalMax     = "max"
	signalEpisode = "alarm_episode"
)

var centralSignals = []string{signalMean, signalMin, signalMax, signalEpisode}

// centralModes names the modes of the central pipeline's outputs, as its
// workers' BackfillWorker does (pipeline.SinkEnv).
func centralModes(t testing.TB) streaming.ModeNames {
	t.Helper()
	p, err := pipeline.Parse(pipelines.Spec("iot-portal-central.yaml"), pipeline.WithEnv(func(string) (string, bool) { return "", false }))
	require.NoError(t, err)
	env, err := p.SinkEnv(nil)
	require.NoError(t, err)
	return env.Modes
}

// archiveRows are the rows a 3-partition pipeline archives: each sensor
// lives in one partition (as Kafka keying puts it), every signal of the
// central pipeline's graph, event times unique per (sensor, signal).
func archiveRows(shard int32, n int) []parquet.Row {
	var rows []parquet.Row
	signals := []string{signalMean, signalMin, signalMax}
	for off := range int64(n) {
		sensor := fmt.Sprintf("p%d-sensor-%02d", shard, off%11)
		ts := int64(1_760_000_000_000_000_000) + off*int64(time.Second)
		for i, sig := range signals {
			rows = append(rows, parquet.Row{Sensor: sensor, Signal: sig, TS: ts, Value: float64(off)*1.5 + float64(i), Offset: off})
		}
		if off%17 == 0 {
			rows = append(rows, parquet.Row{Sensor: sensor, Signal: signalEpisode, TS: ts, Mode: int32(1 + off%2), Value: float64(off), Offset: off})
		}
	}
	return rows
}

type (
	point    = devstack.SignalPoint
	pointVal = devstack.SignalValue
)

// wantPoints is what the live pipeline writes to InfluxDB for rows
// (influx.OutputPoint of each row's output, with the pipeline's modes).
func wantPoints(rows []parquet.Row, modes streaming.ModeNames) map[point]pointVal {
	out := map[point]pointVal{}
	for _, r := range rows {
		v := pointVal{Value: r.Value}
		if name, ok := modes(r.Signal, streaming.Mode(r.Mode)); ok {
			v.Mode = name
		}
		out[point{Sensor: r.Sensor, Measurement: r.Signal, TS: r.TS}] = v
	}
	return out
}

func readPoints(t *testing.T, srv *influxtest.Server, db string) map[point]pointVal {
	t.Helper()
	got, err := srv.Influx().Points(context.Background(), db, centralSignals)
	require.NoError(t, err)
	return got
}

func requireSamePoints(t *testing.T, want, got map[point]pointVal, where string) {
	t.Helper()
	missing, wrong := 0, 0
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case g.Mode != w.Mode || math.Abs(g.Value-w.Value) > 1e-9*math.Max(1, math.Abs(w.Value)):
			wrong++
		}
	}
	require.Zero(t, missing, "%s: %d of %d points missing", where, missing, len(want))
	require.Zero(t, wrong, "%s: %d points differ", where, wrong)
	require.Len(t, got, len(want), "%s holds points no archived row makes", where)
}

// runBackfill runs a BackfillWorkflow on the dev server and waits for it.
func runBackfill(t *testing.T, c client.Client, in workflows.BackfillInput) workflows.BackfillProgress {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.BackfillWorkflowID(in.Name), TaskQueue: workflows.ControlTaskQueue}, workflows.BackfillWorkflow, in)
	require.NoError(t, err)
	var p workflows.BackfillProgress
	require.NoError(t, run.Get(ctx, &p))
	require.True(t, p.Done)
	return p
}

// A backfill from an S3 archive (rolling files on versitygw) and from a
// compacted local archive (the old one-file-per-checkpoint files, then
// compacted) both reproduce, in a real InfluxDB, exactly the points the
// live pipeline wrote for the archived rows; a backfill into a Kafka topic
// publishes every row once, keyed by sensor, in archive order per sensor.
func TestBackfillReproducesPoints(t *testing.T) {
	ctx := context.Background()
	tsrv := temporaltest.Start(t)
	influx := influxtest.Start(t)
	s3srv := s3test.Start(t, "archive")
	settings := s3srv.Settings(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "signals.replay"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)

	var all []parquet.Row
	rowsOf := map[int32][]parquet.Row{}
	for shard := range int32(3) {
		rowsOf[shard] = archiveRows(shard, 700+int(shard)*50)
		all = append(all, rowsOf[shard]...)
	}

	// S3: the rolling writer, small files so several roll, some rows
	// finished by a restore; snappy, as iot-portal's central spec writes.
	s3loc, err := archiveloc.Parse("s3://archive/prod")
	require.NoError(t, err)
	s3arc, err := archiveloc.Open(ctx, s3loc, settings)
	require.NoError(t, err)
	for shard, rows := range rowsOf {
		w, err := parquet.NewRollingWriter(s3arc, "iot-portal", shard, 1, parquet.WithTargetFileSize(16<<10), parquet.WithRowGroupRows(512),
			parquet.WithCompression(parquet.Snappy))
		require.NoError(t, err)
		_, err = w.Restore(ctx, parquet.RestorePoint{Cut: -1})
		require.NoError(t, err)
		for i := 0; i < len(rows); {
			j := i
			for j < len(rows) && rows[j].Offset == rows[i].Offset {
				j++
			}
			require.NoError(t, w.Append(ctx, rows[i:j]...))
			if off := rows[i].Offset; off%100 == 99 {
				_, err := w.PreCommit(ctx, off)
				require.NoError(t, err)
				_, err = w.Commit(ctx, off)
				require.NoError(t, err)
			}
			i = j
		}
		last := rows[len(rows)-1].Offset
		_, err = w.PreCommit(ctx, last)
		require.NoError(t, err)
		// The owner dies after the checkpoint; the next one finishes the
		// open file.
		next, err := parquet.NewRollingWriter(s3arc, "iot-portal", shard, 2)
		require.NoError(t, err)
		_, err = next.Restore(ctx, parquet.RestorePoint{Cut: last, Epoch: 1})
		require.NoError(t, err)
	}

	// Local: many small snappy files, compacted (into zstd files).
	dir := t.TempDir()
	local, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	for shard, rows := range rowsOf {
		w, err := parquet.NewWriter(local, "iot-portal", shard, 1, parquet.WithCompression(parquet.Snappy))
		require.NoError(t, err)
		for i, r := range rows {
			require.NoError(t, w.Append(ctx, r))
			if i%40 == 39 && (i+1 == len(rows) || rows[i+1].Offset != r.Offset) {
				_, _, err := w.Flush(ctx)
				require.NoError(t, err)
			}
		}
		_, _, err = w.Flush(ctx)
		require.NoError(t, err)
	}
	p := parquet.DefaultCompactPolicy()
	p.MinAge = 0
	cr, err := parquet.Compact(ctx, local, "", "", p, time.Now())
	require.NoError(t, err)
	require.NotEmpty(t, cr.Runs)
	rep, err := parquet.Verify(ctx, local, "", "", 2)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.Equal(t, 3, rep.Files, "one file per partition after compaction")

	modes := centralModes(t)
	b := &BackfillWorker{URL: influx.URL, S3: settings, Brokers: kc.ListenAddrs(), Modes: modes}
	require.NoError(t, b.Start(tsrv.Client))
	t.Cleanup(func() { b.Close(context.Background()) })

	want := wantPoints(all, modes)
	require.NotEmpty(t, func() (named []string) {
		for _, v := range want {
			if v.Mode != "" {
				named = append(named, v.Mode)
			}
		}
		return named
	}(), "the episodes' modes are named, as the live pipeline names them")
	for _, tc := range []struct{ name, location, db string }{
		{"from-s3", s3loc.String(), "from_s3"},
		{"from-compacted", "file://" + dir, "from_compacted"},
	} {
		prog := runBackfill(t, tsrv.Client, workflows.BackfillInput{
			Name: tc.name, Location: tc.location, Sink: InfluxSinkName(tc.db + "/autogen"), Window: 2, FilesPerActivity: 3,
		})
		require.Equal(t, int64(len(all)), prog.RowsDone, tc.name)
		require.Equal(t, 3, prog.PartitionsDone)
		requireSamePoints(t, want, readPoints(t, influx, tc.db), tc.name)
	}

	// Kafka: every row once, keyed by sensor, in order per sensor.
	prog := runBackfill(t, tsrv.Client, workflows.BackfillInput{Name: "to-kafka", Location: "file://" + dir, Sink: KafkaSinkName("signals.replay")})
	require.Equal(t, int64(len(all)), prog.Written)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("signals.replay"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	type sig struct {
		sensor, signal string
		ts             int64
	}
	got := map[sig]int{}
	lastTS := map[string]int64{}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for n := 0; n < len(all); {
		fs := cl.PollFetches(pctx)
		require.NoError(t, pctx.Err(), "read %d of %d records", n, len(all))
		fs.EachRecord(func(r *kgo.Record) {
			s, _, err := kafka.DecodeSignal[streaming.Mode, ReplayedSignal](r.Value)
			require.NoError(t, err)
			require.Equal(t, s.Key, string(r.Key), "records are keyed by sensor")
			require.GreaterOrEqual(t, s.TS, lastTS[s.Key], "a sensor's signals arrive in archive order")
			lastTS[s.Key] = s.TS
			got[sig{s.Key, s.Payload.Signal, s.TS}]++
			n++
		})
	}
	for _, r := range all {
		require.Equal(t, 1, got[sig{r.Sensor, r.Signal, r.TS}], "row %+v", r)
	}
}

// TestCreateDatabaseErrorsRedactThePassword: backfill.influx_url may
// carry user:password (sent as basic auth); the errors of the CREATE
// DATABASE a backfill's sink runs first named the URL as given, password
// and all, into the activity's failure and the worker's log.
func TestCreateDatabaseErrorsRedactThePassword(t *testing.T) {
	// Refused: nothing listens on the port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	err = createDatabase("http://tflo:s3cret@"+addr, "", "iot", nil)
	require.ErrorIs(t, err, activities.ErrSinkUnavailable)
	require.ErrorContains(t, err, "http://tflo:xxxxx@"+addr)
	require.NotContains(t, err.Error(), "s3cret")

	// Answered with an error status.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"authorization failed"}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://tflo:s3cret@", 1)
	err = createDatabase(u, "", "iot", nil)
	require.ErrorContains(t, err, "401")
	require.ErrorContains(t, err, "tflo:xxxxx@")
	require.NotContains(t, err.Error(), "s3cret")
}
