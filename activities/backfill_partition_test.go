package activities_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

func partitionEnv(sink *memSink) (*activityEnv, *activities.Backfills) {
	env, b := backfillEnv(sink)
	return &activityEnv{env}, b
}

// shardFiles writes files of perFile offsets each into shard of pipeline.
func shardFiles(t *testing.T, a parquet.Archive, pipeline string, shard int32, files, perFile int) int {
	t.Helper()
	w, err := parquet.NewWriter(a, pipeline, shard, 1)
	require.NoError(t, err)
	n := 0
	for f := range files {
		rows := make([]parquet.Row, perFile)
		for i := range rows {
			off := int64(f*perFile + i)
			rows[i] = parquet.Row{Sensor: fmt.Sprintf("%s-%d", pipeline, shard), Signal: "mean", TS: 1_700_000_000_000_000_000 + off*int64(time.Second), Value: float64(off), Offset: off}
		}
		_, err := w.WriteFile(context.Background(), rows)
		require.NoError(t, err)
		n += perFile
	}
	return n
}

// replayChain runs ReplayPartition from in, each activity starting where
// the last stopped, as the workflow chains them, until one is done (at
// most calls activities); it returns their results.
func replayChain(t *testing.T, env *activityEnv, b *activities.Backfills, in activities.ReplayPartitionInput, calls int) []activities.ReplayPartitionResult {
	t.Helper()
	var out []activities.ReplayPartitionResult
	for {
		require.Less(t, len(out), calls, "no activity of the chain was done")
		var res activities.ReplayPartitionResult
		require.NoError(t, env.run(b.ReplayPartition, in, &res))
		out = append(out, res)
		if res.Done {
			return out
		}
		in.Start = res.Next
	}
}

// sumResults adds up a chain's files, bytes, rows and rows written.
func sumResults(results []activities.ReplayPartitionResult) (total activities.ReplayPartitionResult) {
	for _, r := range results {
		total.Files += r.Files
		total.Bytes += r.Bytes
		total.Rows += r.Rows
		total.Written += r.Written
	}
	return total
}

func TestReplayPartitionChainsActivities(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	rows := shardFiles(t, arc, "iot", 2, 30, 50)
	shardFiles(t, arc, "iot", 3, 5, 50) // another partition, not read
	sink := newMemSink()
	env, b := partitionEnv(sink)
	in := activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000002/", Sink: "mem", MaxFiles: 10, BatchRows: 64}
	results := replayChain(t, env, b, in, 5)
	for _, res := range results[:len(results)-1] {
		assert.Equal(t, 10, res.Files, "a chained activity stops after MaxFiles files")
	}
	total := sumResults(results)
	assert.Equal(t, 30, total.Files)
	assert.Equal(t, int64(rows), total.Rows)
	assert.Equal(t, int64(rows), total.Written)
	require.Len(t, sink.counts, rows)
	for k, n := range sink.counts {
		require.Equal(t, 1, n, "%s written %d times", k, n)
	}
}

// A replay that fails after some flushed batches resumes, on retry, after
// the last row it heartbeated, and its result counts the rows of every
// attempt.
func TestReplayPartitionResumesFromHeartbeat(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	rows := shardFiles(t, arc, "iot", 0, 8, 1000)
	sink := func() *memSink { m := newMemSink(); m.failAt = 30; return m }()
	env, b := partitionEnv(sink)
	var last converter.EncodedValues
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) { last = d })
	in := activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000000/", Sink: "mem", BatchRows: 200, HeartbeatRows: 1000}
	var res activities.ReplayPartitionResult
	err := env.run(b.ReplayPartition, in, &res)
	require.ErrorContains(t, err, "503")
	require.NotNil(t, last, "the failed attempt heartbeated")
	var hb activities.ReplayPartitionResult
	require.NoError(t, last.Get(&hb))
	assert.Greater(t, hb.Rows, int64(0))
	env.SetHeartbeatDetails(hb)
	require.NoError(t, env.run(b.ReplayPartition, in, &res))
	assert.True(t, res.Resumed)
	assert.True(t, res.Done)
	assert.Equal(t, int64(rows), res.Rows, "rows of both attempts")
	assert.Equal(t, 8, res.Files)
	require.Len(t, sink.counts, rows)
	twice := 0
	for _, n := range sink.counts {
		if n > 1 {
			twice++
		}
	}
	assert.Less(t, twice, 1000, "only rows after the last heartbeat are written again")
}

// TestReplayPartitionGoesOnWithThen: an activity given partitions after
// its own (small shards batched by the workflow) replays them in order
// within MaxFiles files, reports how many it finished and where it
// stopped in the next, and a retry after a failure in the second resumes
// there from its heartbeat. Every row is written, none of another
// partition, and the chain's counts add up.
func TestReplayPartitionGoesOnWithThen(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	rows := 0
	for shard := range int32(5) {
		rows += shardFiles(t, arc, "iot", shard, 2, 40)
	}
	shardFiles(t, arc, "iot", 9, 3, 40) // another partition, not given
	sink := func() *memSink { m := newMemSink(); m.failAt = 4; return m }()
	env, b := partitionEnv(sink)
	var last converter.EncodedValues
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) { last = d })
	parts := []string{"iot/shard-000000/", "iot/shard-000001/", "iot/shard-000002/", "iot/shard-000003/", "iot/shard-000004/"}
	in := activities.ReplayPartitionInput{Location: loc, Partition: parts[0], Then: parts[1:], Sink: "mem", MaxFiles: 5, BatchRows: 40, HeartbeatRows: 40}

	// The fourth write (shard 1's second file) fails; the retry resumes
	// from the heartbeat, in shard 1, with shard 0 finished.
	var res activities.ReplayPartitionResult
	require.ErrorContains(t, env.run(b.ReplayPartition, in, &res), "replay iot/shard-000001/")
	var hb activities.ReplayPartitionResult
	require.NoError(t, last.Get(&hb))
	assert.Equal(t, 1, hb.Finished)
	assert.Equal(t, 3, hb.Files)
	env.SetHeartbeatDetails(hb)
	require.NoError(t, env.run(b.ReplayPartition, in, &res))
	assert.True(t, res.Resumed)
	assert.False(t, res.Done, "5 files of 10 were the activity's bound")
	assert.Equal(t, 2, res.Finished, "shards 0 and 1 finished")
	assert.Equal(t, 5, res.Files)
	assert.NotEmpty(t, res.Next.File, "it stopped inside shard 2, after its first file")

	// The next activity goes on in shard 2 from there, as the workflow's
	// lane does, and finishes the rest.
	in2 := in
	in2.Partition, in2.Start, in2.Then = parts[2], res.Next, parts[3:]
	env.SetHeartbeatDetails(nil)
	var res2 activities.ReplayPartitionResult
	require.NoError(t, env.run(b.ReplayPartition, in2, &res2))
	assert.True(t, res2.Done)
	assert.Equal(t, 3, res2.Finished)
	assert.Equal(t, 5, res2.Files)
	assert.Equal(t, int64(rows), res.Rows+res2.Rows)
	require.Len(t, sink.counts, rows, "every row of the five shards, none of shard 9")
	for k := range sink.counts {
		assert.NotContains(t, k, "iot-9/", "shard 9 was not given")
	}
}

// TestReplayPartitionHeartbeatsThatItStopsAtMaxFiles: an activity that
// reads MaxFiles files and stops, between partitions of its batch or
// inside one, says so in its last heartbeat (which starter backfill
// status shows until the activity completes), with where the next
// activity goes on; its heartbeats before did not. Before, the last
// heartbeat of one stopping between partitions read as the next
// partition at its start, which no activity replayed.
func TestReplayPartitionHeartbeatsThatItStopsAtMaxFiles(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	for shard := range int32(2) {
		shardFiles(t, arc, "iot", shard, 2, 40)
	}
	env, b := partitionEnv(newMemSink())
	rec := &heartbeatRecorder{}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{rec}})
	parts := []string{"iot/shard-000000/", "iot/shard-000001/"}
	for _, c := range []struct {
		name     string
		maxFiles int
		finished int
		file     bool // stopped inside a partition, at a file
	}{
		{"between partitions", 2, 1, false},
		{"inside a partition", 1, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.beats = nil
			in := activities.ReplayPartitionInput{Location: loc, Partition: parts[0], Then: parts[1:], Sink: "mem", MaxFiles: c.maxFiles}
			var res activities.ReplayPartitionResult
			require.NoError(t, env.run(b.ReplayPartition, in, &res))
			require.False(t, res.Done)
			beats := rec.beats
			require.NotEmpty(t, beats)
			last := beats[len(beats)-1]
			assert.True(t, last.Stopping, "the last heartbeat says the activity stops: %+v", last)
			assert.Equal(t, c.finished, last.Finished)
			assert.Equal(t, c.file, last.Next.File != "", "where the next activity goes on: %+v", last.Next)
			assert.Equal(t, c.maxFiles, last.Files)
			for _, hb := range beats[:len(beats)-1] {
				assert.False(t, hb.Stopping, "a heartbeat before the stop: %+v", hb)
			}
			assert.True(t, res.Stopping)
		})
	}
}

// heartbeatRecorder is a worker interceptor that records every
// ReplayPartition heartbeat as the activity makes it, before the SDK's
// throttling (which sends the first of a burst, and on success drops
// the last it held back).
type heartbeatRecorder struct {
	interceptor.WorkerInterceptorBase
	beats []activities.ReplayPartitionResult
}

func (r *heartbeatRecorder) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &heartbeatInbound{rec: r}
	i.Next = next
	return i
}

type heartbeatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	rec *heartbeatRecorder
}

func (i *heartbeatInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	o := &heartbeatOutbound{rec: i.rec}
	o.Next = outbound
	return i.Next.Init(o)
}

type heartbeatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	rec *heartbeatRecorder
}

// RecordHeartbeat runs on the activity's goroutine: the test reads beats
// after the activity returned.
func (o *heartbeatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	if len(details) == 1 {
		if hb, ok := details[0].(activities.ReplayPartitionResult); ok {
			o.rec.beats = append(o.rec.beats, hb)
		}
	}
	o.Next.RecordHeartbeat(ctx, details...)
}

// TestReplayPartitionNamesAnEmptyPartitionOfThen: an empty name among the
// partitions after the activity's own is refused naming it, not as a
// missing partition or sink. Bug: the error said "partition and sink are
// required" of an input that had both.
func TestReplayPartitionNamesAnEmptyPartitionOfThen(t *testing.T) {
	loc, _ := writeArchive(t, 0, 0)
	env, b := partitionEnv(newMemSink())
	in := activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000000/", Then: []string{"iot/shard-000001/", ""}, Sink: "mem"}
	var res activities.ReplayPartitionResult
	err := env.run(b.ReplayPartition, in, &res)
	require.Error(t, err)
	typ, nonRetryable := appErrType(t, err)
	assert.Equal(t, activities.ErrTypeBadInput, typ)
	assert.True(t, nonRetryable)
	assert.ErrorContains(t, err, "replay partition iot/shard-000000/: partition 2 of then (of 2) is empty")
	assert.NotContains(t, err.Error(), "required")
}

// listFailsOnce is an archive whose listing of prefix fails once, as an
// object store's does in an outage.
type listFailsOnce struct {
	parquet.Archive
	prefix string
	failed atomic.Bool
}

func (a *listFailsOnce) List(ctx context.Context, prefix string) ([]parquet.ObjectInfo, error) {
	if strings.HasPrefix(prefix, a.prefix) && a.failed.CompareAndSwap(false, true) {
		return nil, errors.New("s3: 503 slow down")
	}
	return a.Archive.List(ctx, prefix)
}

// TestReplayPartitionRetryAfterAPartitionEndsStartsTheNext: a batched
// activity whose store fails listing its second partition (after the
// first ended, before a file of the second) is retried from its last
// heartbeat and goes on with the second. Bug: the heartbeat at the
// first's end kept its finished count (the first not counted) and reset
// its position to the start, so the retry replayed the first partition
// again and counted its files and rows twice. The heartbeats give the
// batch's size, also over a heartbeat of a build before it, and the last
// tells the batch replayed to its end (starter backfill status reads it).
func TestReplayPartitionRetryAfterAPartitionEndsStartsTheNext(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	rows := 0
	for shard := range int32(3) {
		rows += shardFiles(t, arc, "iot", shard, 2, 40)
	}
	sink := newMemSink()
	env, b := partitionEnv(sink)
	failing := &listFailsOnce{Archive: arc, prefix: "iot/shard-000001/"}
	b.Archives = archiveIs(failing)
	var last converter.EncodedValues
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) { last = d })
	parts := []string{"iot/shard-000000/", "iot/shard-000001/", "iot/shard-000002/"}
	in := activities.ReplayPartitionInput{Location: loc, Partition: parts[0], Then: parts[1:], Sink: "mem", BatchRows: 40, HeartbeatRows: 40}
	var res activities.ReplayPartitionResult
	require.ErrorContains(t, env.run(b.ReplayPartition, in, &res), "503")
	var hb activities.ReplayPartitionResult
	require.NoError(t, last.Get(&hb))
	assert.Equal(t, 1, hb.Finished, "shard 0 finished")
	assert.Equal(t, 2, hb.Files)
	assert.Equal(t, 3, hb.BatchSize)
	hb.BatchSize = 0 // as a build before it heartbeated
	env.SetHeartbeatDetails(hb)
	require.NoError(t, env.run(b.ReplayPartition, in, &res))
	assert.True(t, res.Resumed)
	assert.True(t, res.Done)
	assert.Equal(t, 3, res.Finished)
	assert.Equal(t, 3, res.BatchSize, "as its last heartbeat, before Done")
	require.NoError(t, last.Get(&hb))
	assert.True(t, hb.Resumed)
	assert.Equal(t, 3, hb.BatchSize, "the retry's heartbeats too")
	assert.Equal(t, 6, res.Files, "each file counted once")
	assert.Equal(t, int64(rows), res.Rows, "each row counted once")
	require.Len(t, sink.counts, rows)
	twice := 0
	for _, n := range sink.counts {
		if n > 1 {
			twice++
		}
	}
	assert.Zero(t, twice, "rows written again")
}

// Compaction between two activities of a partition: the next activity's
// start position names a file that is gone; it resumes by offset.
func TestReplayPartitionAfterCompaction(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	rows := shardFiles(t, arc, "iot", 1, 20, 30)
	sink := newMemSink()
	env, b := partitionEnv(sink)
	in := activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000001/", Sink: "mem", MaxFiles: 7}
	var res activities.ReplayPartitionResult
	require.NoError(t, env.run(b.ReplayPartition, in, &res))
	require.False(t, res.Done)
	p := parquet.DefaultCompactPolicy()
	p.MinAge = 0
	cr, err := parquet.Compact(context.Background(), arc, "", "", p, time.Now())
	require.NoError(t, err)
	require.NotEmpty(t, cr.Runs)
	in.Start, in.MaxFiles = res.Next, 100
	require.NoError(t, env.run(b.ReplayPartition, in, &res))
	require.True(t, res.Done)
	require.Len(t, sink.counts, rows)
	for k, n := range sink.counts {
		require.Equal(t, 1, n, "%s written %d times", k, n)
	}
}

func TestListPartitionsPages(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	var want []string
	for _, p := range []string{"a", "iot", "z"} {
		for s := range int32(3) {
			shardFiles(t, arc, p, s*7, 3, 2)
			want = append(want, parquet.ShardPrefix(p, s*7))
		}
	}
	// Working objects of the archive, and hidden names at any depth (a
	// Spark _SUCCESS marker, a .DS_Store, a hidden folder in a shard), are
	// no partition, as the readers skip them. Bug: ListPartitions skipped
	// hidden top-level names only, and failed the backfill ("bad archive
	// file name") on the others.
	for _, name := range []string{parquet.StagingDir + "/staging/iot/shard-000000/rec-x", "iot/_SUCCESS", "a/.DS_Store",
		"z/shard-000007/.tmp/part", "iot/shard-000014/_x"} {
		require.NoError(t, arc.PutAtomic(context.Background(), name, []byte("x")))
	}
	env, b := partitionEnv(newMemSink())
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		var res activities.ListPartitionsResult
		require.NoError(t, env.run(b.ListPartitions, activities.ListPartitionsInput{Location: loc, After: after, Limit: 4}, &res))
		got = append(got, res.Partitions...)
		if !res.More {
			break
		}
		require.Len(t, res.Partitions, 4)
		after = res.Partitions[len(res.Partitions)-1]
	}
	assert.Equal(t, want, got)
	var tot activities.ArchiveTotals
	require.NoError(t, env.run(b.CountArchive, activities.CountArchiveInput{Location: loc}, &tot))
	assert.Equal(t, activities.ArchiveTotals{Files: 27, Bytes: tot.Bytes, Partitions: 9}, tot)
	assert.Positive(t, tot.Bytes)
}

// Backfill refuses files of another schema: CountArchive before anything
// is written (first and last file of each partition), ReplayPartition for
// any file it reaches; both non-retryable, naming the file and both
// fingerprints.
func TestBackfillRefusesIncompatibleFiles(t *testing.T) {
	type other struct {
		Sensor  string  `parquet:"sensor"`
		Reading float64 `parquet:"reading"`
		Offset  int64   `parquet:"offset"`
	}
	foreign := func() []byte {
		var buf bytes.Buffer
		w := pq.NewGenericWriter[other](&buf, pq.KeyValueMetadata(parquet.FingerprintKey, "pq1-0000000000000000000000000000beef"))
		_, err := w.Write([]other{{"s", 1, 1000}})
		require.NoError(t, err)
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	for _, where := range []string{"last", "middle"} {
		t.Run(where, func(t *testing.T) {
			loc, arc := writeArchive(t, 0, 0)
			shardFiles(t, arc, "iot", 0, 4, 10)
			name := parquet.FileKey{Pipeline: "iot", Shard: 0, Epoch: 1, First: 1000, Last: 1000}.Name()
			if where == "middle" {
				// Offsets 15-25: past what the files before it hold (up
				// to 19), so the replay reads it (a file earlier files
				// wholly cover is skipped by its name, unread).
				name = parquet.FileKey{Pipeline: "iot", Shard: 0, Epoch: 1, First: 15, Last: 25}.Name()
			}
			require.NoError(t, arc.PutAtomic(context.Background(), name, foreign()))
			env, b := partitionEnv(newMemSink())
			var tot activities.ArchiveTotals
			err := env.run(b.CountArchive, activities.CountArchiveInput{Location: loc}, &tot)
			if where == "last" {
				require.Error(t, err)
				typ, nonRetryable := appErrType(t, err)
				assert.Equal(t, activities.ErrTypeSchemaMismatch, typ)
				assert.True(t, nonRetryable)
				assert.Contains(t, err.Error(), name)
				assert.Contains(t, err.Error(), "beef")
				assert.Contains(t, err.Error(), parquet.SchemaFingerprint())
				return
			}
			require.NoError(t, err, "the middle file is not sampled by the count")
			var res activities.ReplayPartitionResult
			err = env.run(b.ReplayPartition, activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000000/", Sink: "mem"}, &res)
			require.Error(t, err)
			typ, nonRetryable := appErrType(t, err)
			assert.Equal(t, activities.ErrTypeSchemaMismatch, typ)
			assert.True(t, nonRetryable)
			assert.Contains(t, err.Error(), name)
		})
	}
}

type activityEnv struct {
	*testsuite.TestActivityEnvironment
}

func (e *activityEnv) run(fn, in, out any) error {
	v, err := e.ExecuteActivity(fn, in)
	if err != nil {
		return err
	}
	return v.Get(out)
}

// A hidden folder holding a name that sorts after '~' (a '~' or a
// non-ASCII letter) is skipped like any other. Bug: the listing went on
// after "<folder>/~", found that name again, and looped until the
// activity timed out: the backfill failed on heartbeat timeouts.
func TestListPartitionsSkipsHiddenFoldersOfAnyNames(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	shardFiles(t, arc, "a", 0, 1, 2)
	shardFiles(t, arc, "iot", 1, 1, 2)
	for _, name := range []string{"_tmp/~lock", "a/_temporary/résumé", "iot/.cache/~x"} {
		require.NoError(t, arc.PutAtomic(context.Background(), name, []byte("x")))
	}
	env, b := partitionEnv(newMemSink())
	var res activities.ListPartitionsResult
	done := make(chan error, 1)
	go func() { done <- env.run(b.ListPartitions, activities.ListPartitionsInput{Location: loc}, &res) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("ListPartitions did not return: it keeps listing the same hidden name")
	}
	assert.Equal(t, []string{"a/shard-000000/", "iot/shard-000001/"}, res.Partitions)
	assert.False(t, res.More)
}

// A file whose rows earlier files all cover (an epoch that re-archived a
// range already archived) yields no row, yet CountArchive counts it: the
// replay counts it too, so FilesDone and BytesDone reach the totals. Bug:
// a file counted only when its first row was read, and progress stopped
// short of 100% (files 3/6).
func TestReplayPartitionCountsCoveredFiles(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	part := func(epoch streaming.Epoch, from, to int64) {
		w, err := parquet.NewWriter(arc, "iot", 0, epoch)
		require.NoError(t, err)
		var rows []parquet.Row
		for off := from; off <= to; off++ {
			rows = append(rows, parquet.Row{Sensor: "s", Signal: "mean", TS: 1_700_000_000_000_000_000 + off*int64(time.Second), Value: float64(off), Offset: off})
		}
		_, err = w.WriteFile(context.Background(), rows)
		require.NoError(t, err)
	}
	part(1, 0, 99)
	part(2, 50, 99) // covered by the first file
	part(1, 100, 149)
	part(2, 120, 149) // covered by the third
	part(1, 150, 199)
	part(2, 180, 199) // covered by the fifth, and last of the partition
	env, b := partitionEnv(newMemSink())
	var tot activities.ArchiveTotals
	require.NoError(t, env.run(b.CountArchive, activities.CountArchiveInput{Location: loc}, &tot))
	require.Equal(t, 6, tot.Files)
	for _, maxFiles := range []int{1, 2, 100} {
		in := activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000000/", Sink: "mem", MaxFiles: maxFiles}
		total := sumResults(replayChain(t, env, b, in, 10))
		assert.Equal(t, tot.Files, total.Files, "MaxFiles %d: files", maxFiles)
		assert.Equal(t, tot.Bytes, total.Bytes, "MaxFiles %d: bytes", maxFiles)
		assert.Equal(t, int64(200), total.Rows, "MaxFiles %d: rows", maxFiles)
	}
}

// A failed partition listing reaches the backfill as ListPartitions'
// error, which no one wraps: it says what was listed and the archive's
// folder, once. Bug: the local archive's own error repeated the listing
// as `list "" after "…"`.
func TestListPartitionsErrorSaysWhatWasListedOnce(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	shardFiles(t, arc, "iot", 1, 1, 2)
	env, b := partitionEnv(newMemSink())
	var res activities.ListPartitionsResult
	require.NoError(t, env.run(b.ListPartitions, activities.ListPartitionsInput{Location: loc}, &res), "the archive opens")
	// The archive's folder replaced by a file: every listing fails.
	dir := arc.Root()
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.WriteFile(dir, []byte("x"), 0o600))
	err := env.run(b.ListPartitions, activities.ListPartitionsInput{Location: loc, After: "iot/shard-000001/"}, &res)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, `list the archive's files after "iot/shard-000001/~": local archive `+dir+": open "+dir+": not a directory", ae.Message())
}

// A compaction between a backfill's count and its replay, or between two
// replays of a partition, puts an output holding its inputs' rows where
// the replay reads it beside or after them. Bug: the replay counted the
// output's whole size on top of the inputs it had read or that it read
// beside it (their rows each read once), so bytes_done, the progress bar's
// measure, passed bytes_total (to twice it). The count and the replay
// count each file for the share of its offsets earlier files do not hold.
func TestReplayPartitionCountsACompactedFileOnce(t *testing.T) {
	const files, perFile = 20, 2000
	for _, tc := range []struct {
		name string
		// between runs after the count (first) and between the replay's
		// first activity (of MaxFiles 7) and the rest (second).
		first, second func(t *testing.T, arc parquet.Archive, rows []parquet.Row)
	}{
		{name: "output beside its inputs before the replay", first: func(t *testing.T, arc parquet.Archive, rows []parquet.Row) {
			// What a compaction leaves between publishing its output and
			// deleting its inputs (or when it stops there): the output is
			// named by the first input's first offset, the whole range
			// and the inputs' highest epoch.
			w, err := parquet.NewWriter(arc, "iot", 1, 1)
			require.NoError(t, err)
			k, err := w.WriteFile(context.Background(), rows)
			require.NoError(t, err)
			require.Equal(t, int64(files*perFile-1), k.Last)
		}},
		{name: "compaction between two replays", second: func(t *testing.T, arc parquet.Archive, _ []parquet.Row) {
			p := parquet.DefaultCompactPolicy()
			p.MinAge = 0
			cr, err := parquet.Compact(context.Background(), arc, "", "", p, time.Now())
			require.NoError(t, err)
			require.Len(t, cr.Runs, 1)
			require.Len(t, cr.Runs[0].Inputs, files)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, arc := writeArchive(t, 0, 0)
			// Random values: files whose size is their rows', not their
			// footers' or a compressor's, so the output is about as large
			// as its inputs.
			rnd := rand.New(rand.NewPCG(1, 2))
			var rows []parquet.Row
			w, err := parquet.NewWriter(arc, "iot", 1, 1)
			require.NoError(t, err)
			for f := range int64(files) {
				var part []parquet.Row
				for off := f * perFile; off < (f+1)*perFile; off++ {
					part = append(part, parquet.Row{Sensor: "s", Signal: "mean", TS: 1_700_000_000_000_000_000 + off*int64(time.Second), Value: rnd.NormFloat64(), Offset: off})
				}
				_, err := w.WriteFile(context.Background(), part)
				require.NoError(t, err)
				rows = append(rows, part...)
			}
			n := len(rows)
			sink := newMemSink()
			env, b := partitionEnv(sink)
			var tot activities.ArchiveTotals
			require.NoError(t, env.run(b.CountArchive, activities.CountArchiveInput{Location: loc}, &tot))
			require.Equal(t, files, tot.Files)
			if tc.first != nil {
				tc.first(t, arc, rows)
			}
			in := activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000001/", Sink: "mem", MaxFiles: 7}
			var res activities.ReplayPartitionResult
			require.NoError(t, env.run(b.ReplayPartition, in, &res))
			results := []activities.ReplayPartitionResult{res}
			if !res.Done {
				if tc.second != nil {
					tc.second(t, arc, rows)
				}
				in.Start, in.MaxFiles = res.Next, 100
				results = append(results, replayChain(t, env, b, in, 2)...)
			}
			total := sumResults(results)
			assert.Equal(t, int64(n), total.Rows, "rows read")
			require.Len(t, sink.counts, n)
			for k, c := range sink.counts {
				require.Equal(t, 1, c, "%s written %d times", k, c)
			}
			// The output's size is not its inputs' (another file's
			// compression): the bytes done come near the total, and do not
			// pass it by more than that difference.
			t.Logf("bytes done %d of %d", total.Bytes, tot.Bytes)
			assert.LessOrEqual(t, total.Bytes, tot.Bytes*11/10, "bytes done past the total")
			assert.GreaterOrEqual(t, total.Bytes, tot.Bytes*8/10, "bytes done short of the total")
		})
	}
}
