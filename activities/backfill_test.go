package activities_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/streaming"
)

// memSink records rows by (sensor, signal, ts) so a replayed row
// overwrites, like an Influx point, and counts how often each was
// written; it can fail its Nth write.
type memSink struct {
	mu      sync.Mutex
	rows    map[string]parquet.Row
	counts  map[string]int
	writes  int
	failAt  int
	flushes int
}

func newMemSink() *memSink { return &memSink{rows: map[string]parquet.Row{}, counts: map[string]int{}} }

func (s *memSink) Write(_ context.Context, outs []streaming.Output) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.writes == s.failAt {
		return errors.New("influx: 503 service unavailable")
	}
	for _, o := range outs {
		r := parquet.RowOf(o)
		k := fmt.Sprintf("%s/%s/%d", r.Sensor, r.Signal, r.TS)
		s.rows[k] = r
		s.counts[k]++
	}
	return nil
}

func (s *memSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushes++
	return nil
}

func (s *memSink) Close(context.Context) error { return nil }

func writeArchive(t *testing.T, files, rowsPerFile int) (string, *parquet.LocalArchive) {
	t.Helper()
	dir := t.TempDir()
	arc, err := parquet.NewLocalArchive(dir)
	require.NoError(t, err)
	w, err := parquet.NewWriter(arc, "iot", 0, 1)
	require.NoError(t, err)
	off := int64(0)
	for f := 0; f < files; f++ {
		rows := make([]parquet.Row, rowsPerFile)
		for i := range rows {
			rows[i] = parquet.Row{Sensor: fmt.Sprintf("s%d", i%3), Signal: "sma", TS: 1_700_000_000_000_000_000 + off*int64(time.Second), Value: float64(off), Offset: off}
			off++
		}
		_, err := w.WriteFile(context.Background(), rows)
		require.NoError(t, err)
	}
	return "file://" + dir, arc
}

func backfillEnv(sink *memSink) (*testsuite.TestActivityEnvironment, *activities.Backfills) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	b := &activities.Backfills{Sinks: func(name string) (streaming.Sink, error) {
		if name != "mem" {
			return nil, fmt.Errorf("no sink named %q", name)
		}
		return sink, nil
	}}
	env.RegisterActivity(b)
	return env, b
}

// shardedArchive writes shards 0 to shards-1 of pipeline iot, each of
// files files of perFile offsets, into a new local archive at loc.
func shardedArchive(t *testing.T, shards int32, files, perFile int) (loc string, arc *parquet.LocalArchive) {
	t.Helper()
	loc, arc = writeArchive(t, 0, 0)
	for s := range shards {
		shardFiles(t, arc, "iot", s, files, perFile)
	}
	return loc, arc
}

// archiveIs is a Backfills.Archives that opens a for every location.
func archiveIs(a parquet.Archive) func(string) (parquet.Archive, string, error) {
	return func(string) (parquet.Archive, string, error) { return a, "", nil }
}

// slowArchiveEnv is a workflow test environment (test timeout 2 min)
// for wf, whose backfill activities read a.
func slowArchiveEnv(a parquet.Archive, wf any) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Backfills{Archives: archiveIs(a)})
	env.RegisterWorkflow(wf)
	env.SetTestTimeout(2 * time.Minute)
	return env
}

// firstFile is the name of the first file of the archive at loc, as
// ListArchive plans it.
func firstFile(t *testing.T, env *testsuite.TestActivityEnvironment, b *activities.Backfills, loc string) string {
	t.Helper()
	v, err := env.ExecuteActivity(b.ListArchive, activities.ListArchiveInput{Location: loc})
	require.NoError(t, err)
	var plan activities.ListArchiveResult
	require.NoError(t, v.Get(&plan))
	require.NotEmpty(t, plan.Files, "archive %s", loc)
	return plan.Files[0].Name
}

func TestListArchivePlansFilesInOrder(t *testing.T) {
	loc, _ := writeArchive(t, 3, 10)
	env, b := backfillEnv(newMemSink())
	v, err := env.ExecuteActivity(b.ListArchive, activities.ListArchiveInput{Location: loc})
	require.NoError(t, err)
	var res activities.ListArchiveResult
	require.NoError(t, v.Get(&res))
	require.Len(t, res.Files, 3)
	assert.Equal(t, int64(30), res.TotalRows)
	for i := 1; i < len(res.Files); i++ {
		assert.Less(t, res.Files[i-1].Name, res.Files[i].Name)
	}
}

func TestListArchiveRefusesOtherFingerprint(t *testing.T) {
	loc, _ := writeArchive(t, 1, 5)
	env, b := backfillEnv(newMemSink())
	_, err := env.ExecuteActivity(b.ListArchive, activities.ListArchiveInput{Location: loc, ExpectedFingerprint: "0123456789abcdef"})
	require.Error(t, err)
	typ, nonRetryable := appErrType(t, err)
	assert.Equal(t, activities.ErrTypeSchemaMismatch, typ)
	assert.True(t, nonRetryable)
	assert.Contains(t, err.Error(), "0123456789abcdef")
	assert.Contains(t, err.Error(), parquet.SchemaFingerprint())
}

func TestReplayFileResumesFromHeartbeat(t *testing.T) {
	loc, _ := writeArchive(t, 1, 2500)
	sink := newMemSink()
	env, b := backfillEnv(sink)
	file := firstFile(t, env, b, loc)

	// A retry after a crash: the last heartbeat (of a build that
	// heartbeated the position alone) said row 2000 was next.
	env.SetHeartbeatDetails(parquet.Position{File: file, Row: 2000})
	v, err := env.ExecuteActivity(b.ReplayFile, activities.ReplayFileInput{Location: loc, File: file, Sink: "mem", BatchRows: 100})
	require.NoError(t, err)
	var res activities.ReplayFileResult
	require.NoError(t, v.Get(&res))
	assert.Equal(t, int64(2000), res.ResumedAt)
	assert.Equal(t, int64(500), res.Rows, "rows before the heartbeat position are not read again")
	assert.Equal(t, int64(500), res.Written)
	assert.Len(t, sink.rows, 500)
	for _, r := range sink.rows {
		assert.GreaterOrEqual(t, r.Offset, int64(2000))
	}
}

func TestReplayFileFailsMidwayThenCompletesIdempotently(t *testing.T) {
	loc, _ := writeArchive(t, 1, 1000)
	sink := func() *memSink { m := newMemSink(); m.failAt = 4; return m }()
	env, b := backfillEnv(sink)
	in := activities.ReplayFileInput{Location: loc, File: firstFile(t, env, b, loc), Sink: "mem", BatchRows: 100}
	_, err := env.ExecuteActivity(b.ReplayFile, in)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "503")
	// Retried from the start (no heartbeat carried here): every row lands
	// once, overwriting what the failed attempt wrote.
	_, err = env.ExecuteActivity(b.ReplayFile, in)
	require.NoError(t, err)
	assert.Len(t, sink.rows, 1000)
}

// TestReplayFileCountsTheRowsOfEveryAttempt: a retry resuming from the
// failed attempt's heartbeat reports the rows that attempt flushed too.
// Bug: the heartbeat held the position alone, and the retry's result
// counted only the rows after it: the backfill's written and skipped
// rows fell short by every row flushed before a retry.
func TestReplayFileCountsTheRowsOfEveryAttempt(t *testing.T) {
	loc, _ := writeArchive(t, 1, 1000)
	// The 4th write fails, after 3 flushed batches of 100 rows (the 100
	// rows before From write nothing).
	sink := func() *memSink { m := newMemSink(); m.failAt = 4; return m }()
	env, b := backfillEnv(sink)
	var last converter.EncodedValues
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) { last = d })
	base := time.Unix(0, 1_700_000_000_000_000_000)
	in := activities.ReplayFileInput{Location: loc, File: firstFile(t, env, b, loc), Sink: "mem", BatchRows: 100, From: base.Add(100 * time.Second)}
	_, err := env.ExecuteActivity(b.ReplayFile, in)
	require.ErrorContains(t, err, "503")
	require.NotNil(t, last, "the failed attempt heartbeated")
	var hb map[string]any
	require.NoError(t, last.Get(&hb))
	env.SetHeartbeatDetails(hb)
	v, err := env.ExecuteActivity(b.ReplayFile, in)
	require.NoError(t, err)
	var res activities.ReplayFileResult
	require.NoError(t, v.Get(&res))
	assert.Equal(t, int64(400), res.ResumedAt)
	assert.Equal(t, int64(1000), res.Rows, "rows of both attempts")
	assert.Equal(t, int64(900), res.Written)
	assert.Equal(t, int64(100), res.Skipped)
	assert.Len(t, sink.rows, 900)
}

func TestReplayFileTimeRange(t *testing.T) {
	loc, _ := writeArchive(t, 1, 100)
	sink := newMemSink()
	env, b := backfillEnv(sink)
	base := time.Unix(0, 1_700_000_000_000_000_000)
	v, err := env.ExecuteActivity(b.ReplayFile, activities.ReplayFileInput{
		Location: loc, File: firstFile(t, env, b, loc), Sink: "mem",
		From: base.Add(10 * time.Second), To: base.Add(20 * time.Second),
	})
	require.NoError(t, err)
	var res activities.ReplayFileResult
	require.NoError(t, v.Get(&res))
	assert.Equal(t, int64(10), res.Written)
	assert.Equal(t, int64(90), res.Skipped)
}

func TestReplayFileBadInput(t *testing.T) {
	loc, _ := writeArchive(t, 1, 1)
	env, b := backfillEnv(newMemSink())
	_, err := env.ExecuteActivity(b.ReplayFile, activities.ReplayFileInput{Location: loc, File: "nope.parquet", Sink: "mem"})
	require.Error(t, err)
	typ, _ := appErrType(t, err)
	assert.Equal(t, activities.ErrTypeBadInput, typ)
	_, err = env.ExecuteActivity(b.ReplayFile, activities.ReplayFileInput{Location: loc, File: "x", Sink: "other"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no sink named "other"`)
	_, err = env.ExecuteActivity(b.ListArchive, activities.ListArchiveInput{Location: "ftp://x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unsupported scheme "ftp"`)
}

// TestBackfillRefusesABadS3ResponseTimeoutForGood: a backfill activity
// on the archive settings of the environment (no Archives given) fails
// for good, not retried, when TFLO_S3_RESPONSE_TIMEOUT is bad: every
// retry would read the same variable. The error names the variable and
// its value.
func TestBackfillRefusesABadS3ResponseTimeoutForGood(t *testing.T) {
	t.Setenv(archiveloc.EnvResponseTimeout, "soon")
	for name, call := range map[string]func(env *testsuite.TestActivityEnvironment, b *activities.Backfills) error{
		"ListArchive": func(env *testsuite.TestActivityEnvironment, b *activities.Backfills) error {
			_, err := env.ExecuteActivity(b.ListArchive, activities.ListArchiveInput{Location: "s3://arch/events"})
			return err
		},
		"CountArchive": func(env *testsuite.TestActivityEnvironment, b *activities.Backfills) error {
			_, err := env.ExecuteActivity(b.CountArchive, activities.CountArchiveInput{Location: "s3://arch/events"})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			env, b := backfillEnv(newMemSink())
			err := call(env, b)
			require.Error(t, err)
			typ, nonRetryable := appErrType(t, err)
			assert.Equal(t, activities.ErrTypeBadInput, typ)
			assert.True(t, nonRetryable, "a bad %s is retried: %v", archiveloc.EnvResponseTimeout, err)
			assert.ErrorContains(t, err, `TFLO_S3_RESPONSE_TIMEOUT "soon": not a Go duration`)
		})
	}
}
