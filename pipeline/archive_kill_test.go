package pipeline_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/s3test"
)

const envArchiveChild = "TFLO_PIPELINE_TEST_ARCHIVE_CHILD" // brokers,durable dir,archive dir,compression

// archivePipeline is the alarm pipeline archiving to dir with small,
// short-lived files (so the kills land on every stage of a file's life)
// compressed with comp, checkpointing every 50ms to the durable folder.
func archivePipeline(addrs []string, durable, archive string, comp parquet.Compression, sinks ...pipeline.SinkSpec) pipeline.Pipeline {
	sink := pipeline.ArchiveSink{Dir: archive, TargetFileSize: 24 << 10, MaxFileAge: 300 * time.Millisecond, Compression: comp}
	p := alarmPipeline(addrs, durable, append([]pipeline.SinkSpec{sink}, sinks...)...)
	src := p.Source.(pipeline.KafkaSource)
	src.SessionTimeout = time.Second
	p.Source = src
	p.Checkpoint.Interval = 50 * time.Millisecond
	return p
}

// TestChildArchiveWorker is not a test on its own: TestArchiveSIGKILLs
// runs the test binary again with this test selected, as a worker in
// another process that it then kills.
func TestChildArchiveWorker(t *testing.T) {
	env := os.Getenv(envArchiveChild)
	if env == "" {
		t.Skip("child process of TestArchiveSIGKILLs")
	}
	f := strings.Split(env, ",")
	comp, err := parquet.ParseCompression(f[3])
	require.NoError(t, err)
	p := archivePipeline(strings.Split(f[0], ";"), f[1], f[2], comp, pipeline.Use(&stdoutSink{out: bufio.NewWriter(os.Stdout), preCommits: true}))
	require.NoError(t, pipeline.Run(context.Background(), p)) // until killed
}

// TestArchiveSIGKILLs (issue 16.5): raw archive files held duplicate rows
// after crashes (the old sink wrote every row it had at a checkpoint,
// including rows past the cut, and a new owner wrote the replayed ones
// again), which any reader but the project's double-counts. Workers in
// other processes archive a stream and are killed with SIGKILL mid-stream
// several times, at random points of their checkpoints; a last worker
// catches up and stops cleanly. An independent reader (arrow-go, every
// published file on its own) then finds every output of an uninterrupted
// run exactly once: no duplicate (shard, offset, signal), nothing missing.
// The workers take turns compressing with zstd and with snappy, so files
// a next owner finished hold both.
func TestArchiveSIGKILLs(t *testing.T) {
	if os.Getenv(envArchiveChild) != "" {
		t.Skip("in the child")
	}
	const parts, sensors, kills = 3, 12, 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	durable, archive := t.TempDir(), t.TempDir()
	rng := rand.New(rand.NewPCG(16, 5))

	// A producer keeps the stream going while the workers live and die.
	var (
		mu       sync.Mutex
		produced []reading
	)
	stopProducing := make(chan struct{})
	var prod sync.WaitGroup
	prod.Go(func() {
		for seq := 1; ; seq += 10 {
			select {
			case <-stopProducing:
				return
			default:
			}
			rs := makeReadings(sensors, seq, seq+9)
			produce(t, addrs, rs)
			mu.Lock()
			produced = append(produced, rs...)
			mu.Unlock()
		}
	})
	stopProducer := func() {
		close(stopProducing)
		prod.Wait()
	}
	defer func() {
		select {
		case <-stopProducing:
		default:
			stopProducer()
		}
	}()

	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildArchiveWorker$", "-test.count=1")
		comp := []parquet.Compression{parquet.Zstd, parquet.Snappy}[k%2]
		cmd.Env = append(os.Environ(), envArchiveChild+"="+strings.Join(addrs, ";")+","+durable+","+archive+","+comp.String())
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		var commits, preCommits atomic.Int64
		read := make(chan struct{})
		go func() {
			defer close(read)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				switch {
				case strings.HasPrefix(sc.Text(), "CK "):
					commits.Add(1)
				case strings.HasPrefix(sc.Text(), "PC "):
					preCommits.Add(1)
				}
			}
		}()
		// Kill after a random number of checkpoints: every other kill
		// right after an archive pre-commit (before that checkpoint's
		// state and commit, mostly), the others after a commit (anywhere
		// in the next checkpoint: cut, pre-commit, state, publish).
		counter, what := &commits, "committed"
		if k%2 == 0 {
			counter, what = &preCommits, "pre-committed"
		}
		target := int64(parts * (2 + rng.IntN(8)))
		require.Eventually(t, func() bool { return counter.Load() >= target }, 60*time.Second, 100*time.Microsecond,
			"worker %d: %d of %d checkpoints %s", k, counter.Load(), target, what)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		<-read
		t.Logf("kill %d after %d checkpoints %s (%d pre-commits, %d commits)", k+1, target, what, preCommits.Load(), commits.Load())
	}

	// The last worker replays from the last checkpoints, catches up with
	// the stream and stops cleanly (its final checkpoints publish every
	// file).
	rec := newRecorder()
	last := start(t, archivePipeline(addrs, durable, archive, parquet.Snappy, rec.shared()))
	stopProducer()
	mu.Lock()
	all := append([]reading(nil), produced...)
	mu.Unlock()
	p := archivePipeline(addrs, durable, archive, parquet.Zstd)
	want := reference(t, p, all)
	lastTS := all[len(all)-1].ts * int64(time.Millisecond)
	last.waitFor(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for k := range want {
			if k.ts == lastTS {
				if _, ok := rec.outs[k]; !ok {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, "the last worker never caught up")
	last.stop(t)

	la, err := parquet.NewLocalArchive(archive)
	require.NoError(t, err)
	rows := archivetest.ReadIndependently(t, la, "")
	dups := archivetest.Duplicates(rows)
	require.Empty(t, dups[:min(len(dups), 5)], "%d rows an independent reader counts twice", len(dups))
	got := map[outKey]outVal{}
	for _, r := range rows {
		got[outKey{r.Sensor, r.Signal, r.TS}] = outVal{streaming.Mode(r.Mode), r.Value}
	}
	var missing []string
	for k := range want {
		if _, ok := got[k]; !ok {
			missing = append(missing, fmt.Sprint(k))
		}
	}
	require.Empty(t, missing, "archived rows missing (%d of %d)", len(missing), len(want))
	require.Equal(t, want, got)
	require.Len(t, rows, len(want))
	t.Logf("%d readings, %d archived rows in %d files, %d kills", len(all), len(rows), countFiles(rows), kills)
	require.Equal(t, []format.CompressionCodec{format.Snappy, format.Zstd}, archiveCodecs(t, archive))
}

// archiveCodecs returns the codecs the column chunks of the Parquet files
// under dir are compressed with, sorted.
func archiveCodecs(t *testing.T, dir string) []format.CompressionCodec {
	t.Helper()
	seen := map[format.CompressionCodec]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*", "*", "*.parquet"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, name := range files {
		f, err := os.Open(name)
		require.NoError(t, err)
		st, err := f.Stat()
		require.NoError(t, err)
		pf, err := pq.OpenFile(f, st.Size())
		require.NoError(t, err, name)
		for _, rg := range pf.Metadata().RowGroups {
			for _, cc := range rg.Columns {
				seen[cc.MetaData.Codec] = true
			}
		}
		require.NoError(t, f.Close())
	}
	return slices.Sorted(maps.Keys(seen))
}

func countFiles(rows []archivetest.FileRow) int {
	files := map[string]bool{}
	for _, r := range rows {
		files[r.File] = true
	}
	return len(files)
}

// The archive sink on S3 (versitygw): a checkpoint reports the rows and
// bytes it committed to the archive (what the round summary shows), files
// are published at a commit after they are finished, not at every
// checkpoint, and a clean stop leaves every output of the run in the
// bucket exactly once.
func TestArchiveSinkOnS3(t *testing.T) {
	srv := s3test.Start(t, "archive")
	const parts = 2
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	sink := pipeline.ArchiveSink{Location: "s3://archive/prod", S3: srv.Settings(t)}
	p := alarmPipeline(addrs, t.TempDir(), sink)
	w := start(t, p)
	require.Eventually(t, func() bool { return w.w.Stats().Owned == parts }, 20*time.Second, 10*time.Millisecond)

	rs := makeReadings(8, 1, 50)
	produce(t, addrs, rs)
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == uint64(len(rs)) }, 20*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, w.w.Checkpoint(ctx))
	var rows, bytes int64
	for _, s := range w.w.Shards() {
		rows += s.Checkpoint.ArchivedRows
		bytes += s.Checkpoint.ArchivedBytes
	}
	want := reference(t, p, rs)
	require.Equal(t, int64(len(want)), rows, "the checkpoint's archived rows")
	require.Positive(t, bytes)

	loc, err := archiveloc.Parse(sink.Location)
	require.NoError(t, err)
	arc, err := archiveloc.Open(ctx, loc, sink.S3)
	require.NoError(t, err)
	require.Empty(t, archivetest.ReadIndependently(t, arc, ""), "a file is published before it is finished")

	more := makeReadings(8, 51, 80)
	produce(t, addrs, more)
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == uint64(len(rs)+len(more)) }, 20*time.Second, 5*time.Millisecond)
	w.stop(t)
	want = reference(t, p, append(rs, more...))
	got := archivetest.ReadIndependently(t, arc, "")
	require.Empty(t, archivetest.Duplicates(got))
	archived := map[outKey]outVal{}
	for _, r := range got {
		archived[outKey{r.Sensor, r.Signal, r.TS}] = outVal{streaming.Mode(r.Mode), r.Value}
	}
	require.Equal(t, want, archived)
	require.Len(t, got, len(want))
}

// Regression: the temp files a crash left in a local archive's folder
// that no write came to again (the staging folder of a shard that moved
// to another worker for good) stayed for ever. Opening the sink deletes
// those over an hour old in every folder (in the background:
// TestArchiveSinkOpensWithoutWaitingForItsSweep) and logs how many, once;
// a live writer's stays.
func TestArchiveSinkSweepsStaleTempFilesAsItOpens(t *testing.T) {
	dir := t.TempDir()
	stale, live := archivetest.StaleTempFiles(t, dir, "plant", 3)
	var logged logtest.Buffer
	env := pipeline.SinkEnv{Pipeline: "plant", Source: &pipeline.KafkaSource{}, Log: slog.New(slog.NewTextHandler(&logged, nil))}
	s, err := pipeline.ArchiveSink{Dir: dir}.OpenSink(context.Background(), env)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	require.Eventually(t, func() bool { return strings.Contains(logged.String(), "stale temp files deleted") },
		30*time.Second, 10*time.Millisecond, "the sweep's log line")
	require.NoFileExists(t, stale, "a crashed writer's temp file")
	require.FileExists(t, live, "a live writer's temp file")
	require.Equal(t, 1, strings.Count(logged.String(), "stale temp files deleted"), logged.String())
	require.Contains(t, logged.String(), "archive=file://"+dir+" deleted=1")
}

// An archive sink names exactly one of a folder and a location, and needs
// a source whose offsets replay.
func TestArchiveSinkRefusals(t *testing.T) {
	env := pipeline.SinkEnv{Pipeline: "plant", Source: &pipeline.KafkaSource{}}
	for _, tc := range []struct {
		sink pipeline.ArchiveSink
		env  pipeline.SinkEnv
		err  string
	}{
		{pipeline.ArchiveSink{}, env, "give exactly one of dir"},
		{pipeline.ArchiveSink{Dir: t.TempDir(), Location: "s3://b/p"}, env, "give exactly one of dir"},
		{pipeline.ArchiveSink{Location: "/var/archive"}, env, "no scheme"},
		{pipeline.ArchiveSink{Location: "gs://b/p"}, env, `unsupported scheme "gs"`},
		{pipeline.ArchiveSink{Dir: t.TempDir()}, pipeline.SinkEnv{Pipeline: "plant", Source: &pipeline.MQTTSource{}}, "offsets replay"},
	} {
		_, err := tc.sink.OpenSink(context.Background(), tc.env)
		require.ErrorContains(t, err, tc.err, "%+v", tc.sink)
	}
	root, err := pipeline.ArchiveSink{Dir: "/var/tflo/archive/"}.Root()
	require.NoError(t, err)
	require.Equal(t, "file:///var/tflo/archive", root)
	root, err = pipeline.ArchiveSink{Location: "s3://bucket/iot/"}.Root()
	require.NoError(t, err)
	require.Equal(t, "s3://bucket/iot", root)
}
