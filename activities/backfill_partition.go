package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// A backfill at scale replays an archive partition by partition (a
// partition is one shard's folder, <pipeline>/shard-<n>/): partitions in
// parallel, each one's files in order, many files per activity. Workflow
// history carries partition names, positions and counts; never file lists.

// CountArchiveInput asks for the size of an archive.
type CountArchiveInput struct {
	Location            string `json:"location"`
	ExpectedFingerprint string `json:"expected_fingerprint,omitempty"`
}

// ArchiveTotals is the size of an archive, from its listing. Bytes
// counts each file's parquet.FileInfo.NewBytes, as ReplayPartition does:
// a file whose offsets earlier files of its partition hold (a
// compaction's output beside its inputs, a range archived again) counts
// for the share of its offsets they do not, so a compaction between the
// count and the replays does not count its output's rows twice.
type ArchiveTotals struct {
	Files      int   `json:"files"`
	Bytes      int64 `json:"bytes"`
	Partitions int   `json:"partitions"`
}

// CountArchive lists the archive page by page and counts its files, bytes
// and partitions (the backfill's progress totals). It also checks the
// schema fingerprint of the first and last file of every partition, so an
// archive of another schema is refused (non-retryable SchemaMismatch,
// naming the file and both fingerprints) before anything is written;
// every file is checked again when it is read. It heartbeats how far it
// counted, and a retry resumes from there.
func (a *Backfills) CountArchive(ctx context.Context, in CountArchiveInput) (ArchiveTotals, error) {
	arc, prefix, err := a.archive(in.Location)
	if err != nil {
		return ArchiveTotals{}, err
	}
	r, err := parquet.NewReader(arc, prefix, parquet.WithExpectedFingerprint(expected(in.ExpectedFingerprint)))
	if err != nil {
		return ArchiveTotals{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	// A retry resumes after the last file its heartbeat counted: the
	// count of a large archive on a slow store may take longer than an
	// attempt may run, and every attempt starting over would fail alike.
	var c countProgress
	if activity.HasHeartbeatDetails(ctx) {
		var hb countProgress
		if err := activity.GetHeartbeatDetails(ctx, &hb); err == nil {
			c = hb
		}
	}
	if err := c.stalled(activity.GetInfo(ctx), time.Now()); err != nil {
		return c.Totals, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("count archive %s: %v", in.Location, err), ErrTypeStalled, nil)
	}
	check := func() error {
		if c.Part == "" {
			return nil
		}
		for _, name := range []string{c.First, c.Last} {
			if err := r.CheckFile(ctx, name); err != nil {
				return classifyArchive(in.Location, err)
			}
		}
		return nil
	}
	t := &c.Totals
	for fi, err := range r.Files(ctx, c.Last, -1) {
		if err != nil {
			return *t, classifyArchive(in.Location, err)
		}
		p := parquet.ShardPrefix(fi.Key.Pipeline, fi.Key.Shard)
		newPart := p != c.Part
		if newPart {
			if err := check(); err != nil {
				return *t, err
			}
			c.Part, c.First, c.Reach = p, fi.Name, -1
			t.Partitions++
		}
		// The reader's SkipThrough, also for the first file after a
		// resume (which the listing starts with -1).
		fi.SkipThrough = c.Reach
		c.Reach = max(c.Reach, fi.Key.Last)
		t.Files++
		t.Bytes += fi.NewBytes()
		c.Last = fi.Name
		// Each check reads two footers (round trips on an object store):
		// heartbeat per partition, not per 10,000 files (the SDK
		// throttles the calls).
		if newPart || t.Files%10000 == 0 {
			c.At = time.Now()
			activity.RecordHeartbeat(ctx, c)
		}
	}
	return *t, check()
}

// countProgress is how far CountArchive counted, as it heartbeats it:
// the totals through file Last, and the first file of the partition Last
// is in (whose first and last file are checked when it ends).
type countProgress struct {
	Totals ArchiveTotals `json:"totals"`
	Part   string        `json:"part,omitempty"`
	First  string        `json:"first,omitempty"`
	Last   string        `json:"last,omitempty"`
	// Reach is the highest offset the files of Part through Last hold
	// (0 from a build before it: the next file may count a little more).
	Reach int64 `json:"reach,omitempty"`
	// At is when the worker heartbeated it (zero from a build before it).
	At time.Time `json:"at,omitempty"`
}

// CountStallLimit is how long a backfill's count of its archive may go
// without progress, its attempts hanging (the heartbeat timeout ends
// each) or failing (a store outage), before an attempt gives up for good
// (ErrTypeStalled): a count that progresses runs on (the backfill bounds
// it at a day), a stuck one fails within about this.
const CountStallLimit = time.Hour

// stalled tells why an attempt (info) of a count that last progressed
// as c says should not go on at now: the last progress, or the first
// attempt's scheduling when no attempt heartbeated, is more than
// CountStallLimit ago. A first attempt is never stalled (it may have
// waited long for a worker).
func (c countProgress) stalled(info activity.Info, now time.Time) error {
	since, what := c.At, "its last progress, after file "+c.Last
	if since.IsZero() {
		if info.Attempt <= 1 {
			return nil
		}
		since, what = info.ScheduledTime, "it was scheduled, with no progress heartbeated"
	}
	if d := now.Sub(since); d > CountStallLimit {
		return fmt.Errorf("attempt %d gives up: %s since %s (%s), more than the %s a count may go without progress: its attempts since hung or failed",
			info.Attempt, d.Round(time.Second), what, since.UTC().Format(time.RFC3339), CountStallLimit)
	}
	return nil
}

// ListPartitionsInput asks for a page of an archive's partitions.
type ListPartitionsInput struct {
	Location string `json:"location"`
	// After is the last partition of the previous page ("" for the first).
	After string `json:"after,omitempty"`
	// Limit is the page size (default 256).
	Limit int `json:"limit,omitempty"`
}

// ListPartitionsResult is a page of partitions (shard folders such as
// "iot/shard-000003/"), in name order; More is false on the last page.
type ListPartitionsResult struct {
	Partitions []string `json:"partitions"`
	More       bool     `json:"more"`
}

// ListPartitions returns the next page of partitions after in.After,
// skipping from one partition to the next with one listing request each
// (file names never contain '~', so "<partition>~" sorts after all of a
// partition's files).
func (a *Backfills) ListPartitions(ctx context.Context, in ListPartitionsInput) (ListPartitionsResult, error) {
	arc, prefix, err := a.archive(in.Location)
	if err != nil {
		return ListPartitionsResult{}, err
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 256
	}
	var res ListPartitionsResult
	after := in.After
	if after != "" {
		after += "~"
	}
	for len(res.Partitions) < limit {
		page, err := parquet.ListAfter(ctx, arc, prefix, after, 1)
		if err != nil {
			return res, err
		}
		if len(page) == 0 {
			return res, nil
		}
		name := page[0].Name
		if next, hidden := parquet.SkipHidden(name); hidden {
			after = next // the archive's working objects, markers such as _SUCCESS
			continue
		}
		k, err := parquet.ParseFileName(name)
		if err != nil {
			return res, temporal.NewNonRetryableApplicationError("archive "+in.Location+": "+err.Error(), ErrTypeBadInput, nil)
		}
		p := parquet.ShardPrefix(k.Pipeline, k.Shard)
		res.Partitions = append(res.Partitions, p)
		after = p + "~"
		// One listing request per partition (a round trip on an object
		// store, a walk of a local folder): heartbeat per partition, as
		// a page of them may take longer than the heartbeat timeout.
		activity.RecordHeartbeat(ctx, len(res.Partitions))
	}
	next, err := parquet.ListAfter(ctx, arc, prefix, after, 1)
	if err != nil {
		return res, err
	}
	res.More = len(next) > 0
	return res, nil
}

// ReplayPartitionInput replays part of one partition, and then of the
// partitions in Then: from Start, files in order, until MaxFiles files
// were read or the partitions end.
type ReplayPartitionInput struct {
	Location            string `json:"location"`
	Partition           string `json:"partition"`
	ExpectedFingerprint string `json:"expected_fingerprint,omitempty"`
	// Start is where the previous activity of this partition stopped
	// (zero: the partition's start).
	Start parquet.Position `json:"start"`
	// Then are partitions replayed after Partition, each from its start,
	// in order, by the same activity while MaxFiles allows: an archive of
	// many small partitions (shards of a file or two) replays in one
	// activity per batch of them, not one per partition.
	Then []string `json:"then,omitempty"`
	// From and To bound the rows' event time, [From, To); zero is open.
	From  time.Time `json:"from,omitempty"`
	To    time.Time `json:"to,omitempty"`
	Graph string    `json:"graph,omitempty"`
	Sink  string    `json:"sink"`
	// MaxFiles bounds the files one activity reads (default 256).
	MaxFiles int `json:"max_files,omitempty"`
	// BatchRows rows go to the sink per write (default 10,000).
	BatchRows int `json:"batch_rows,omitempty"`
	// HeartbeatRows: the sink is flushed and the position heartbeated
	// every this many rows (default 100,000) and at the end.
	HeartbeatRows int `json:"heartbeat_rows,omitempty"`
}

// ReplayPartitionResult reports one activity's replay of a partition (and
// of the partitions after it, ReplayPartitionInput.Then).
type ReplayPartitionResult struct {
	// Partition is the input's (the first replayed).
	Partition string `json:"partition"`
	// Finished counts the partitions of [Partition, Then...] replayed to
	// their end; Next is where the next activity starts in the one after
	// them; Done: nothing is left of any.
	Finished int              `json:"finished,omitempty"`
	Next     parquet.Position `json:"next"`
	Done     bool             `json:"done"`
	// BatchSize is how many partitions the activity replays
	// ([Partition, Then...]): a heartbeat with Finished == BatchSize is
	// of an activity that replayed its whole batch and is finishing (0
	// from a build before it; starter backfill status reads it).
	BatchSize int `json:"batch_size,omitempty"`
	// Stopping: the activity read MaxFiles files and stops (a heartbeat
	// of an activity that is completing, or whose retry completes at
	// once): the next activity goes on where Finished and Next say. Set
	// with the heartbeat before it stops; starter backfill status reads
	// it, which before showed the next activity's start as where this
	// one replayed.
	Stopping bool `json:"stopping,omitempty"`
	// Files read (counted when the reader starts them, also those whose
	// rows earlier files all cover), their Bytes (each file's
	// parquet.FileInfo.NewBytes, as CountArchive counts them: a
	// compaction's output read after some of its inputs counts for the
	// offsets they did not hold),
	// Rows read, Written to the sink, Skipped by the time range (over
	// every attempt of the activity).
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"`
	Rows    int64 `json:"rows"`
	Written int64 `json:"written"`
	Skipped int64 `json:"skipped"`
	// Resumed is true when this attempt continued from a heartbeat.
	Resumed bool `json:"resumed,omitempty"`
}

// ReplayPartition reads a partition's files in order from in.Start (or
// from its last heartbeat, on a retry), streaming one row group at a time,
// writes the rows to the sink in batches, and every HeartbeatRows rows
// flushes the sink and heartbeats its position and counts: a retry
// resumes after the last flushed row, and rows written twice overwrite
// (sinks are idempotent). After every batch and at every file it
// heartbeats the last flushed position again, so a slow sink or store
// does not time the activity out. It stops at a file boundary after MaxFiles
// files. When the partition ends within MaxFiles, it goes on with the
// partitions of in.Then, each from its start (it does not start one once
// MaxFiles files were read). A schema mismatch is non-retryable and names
// the file and both fingerprints.
func (a *Backfills) ReplayPartition(ctx context.Context, in ReplayPartitionInput) (ReplayPartitionResult, error) {
	if in.Partition == "" || in.Sink == "" {
		return ReplayPartitionResult{}, temporal.NewNonRetryableApplicationError("replay partition: partition and sink are required", ErrTypeBadInput, nil)
	}
	if i := slices.Index(in.Then, ""); i >= 0 {
		// Not "partition and sink are required": both were given.
		return ReplayPartitionResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("replay partition %s: partition %d of then (of %d) is empty", in.Partition, i+1, len(in.Then)), ErrTypeBadInput, nil)
	}
	sink, graph, err := a.sinkAndGraph(in.Sink, in.Graph)
	if err != nil {
		return ReplayPartitionResult{}, err
	}
	arc, prefix, err := a.archive(in.Location)
	if err != nil {
		return ReplayPartitionResult{}, err
	}
	rp := &partitionReplay{in: in, sink: sink, graph: graph, arc: arc, prefix: prefix,
		maxFiles: in.MaxFiles, batchRows: in.BatchRows, beatRows: in.HeartbeatRows}
	if rp.maxFiles <= 0 {
		rp.maxFiles = 256
	}
	if rp.batchRows <= 0 {
		rp.batchRows = 10_000
	}
	if rp.beatRows <= 0 {
		rp.beatRows = 100_000
	}
	parts := append([]string{in.Partition}, in.Then...)
	res := ReplayPartitionResult{Partition: in.Partition, Next: in.Start}
	if activity.HasHeartbeatDetails(ctx) {
		var hb ReplayPartitionResult
		if err := activity.GetHeartbeatDetails(ctx, &hb); err == nil && hb.Partition == in.Partition && hb.Finished <= len(parts) {
			res, res.Resumed = hb, true
			// Where the last attempt stopped at MaxFiles, this one stops
			// again (at once, or at the file's end: Next is there); its
			// heartbeats say so again.
			res.Stopping = false
		}
	}
	res.BatchSize = len(parts) // also over a heartbeat of a build before it
	for res.Finished < len(parts) {
		if res.Finished > 0 && res.Next == (parquet.Position{}) && res.Files >= rp.maxFiles {
			// The next partition is left whole to the next activity.
			res.Stopping = true
			return res, nil
		}
		stopped, err := rp.one(ctx, parts[res.Finished], &res)
		if err != nil && errors.Is(ctx.Err(), context.Canceled) {
			// Cancelled (the backfill was): what was flushed goes back
			// with the cancellation, for the backfill's progress.
			return res, temporal.NewCanceledError(res)
		}
		if err != nil || stopped {
			return res, err
		}
		// The partition's rows are flushed: the heartbeat counts it
		// finished, so a retry starts at the next (not counting it, a
		// retry after a store error listing the next replayed this one
		// again and counted its files twice); a retry from the last
		// one's heartbeat is done at once.
		res.Finished++
		res.Next = parquet.Position{}
		// At MaxFiles, the next partition is left to the next activity
		// (at the loop's top): the heartbeat says the activity stops.
		res.Stopping = res.Finished < len(parts) && res.Files >= rp.maxFiles
		activity.RecordHeartbeat(ctx, res)
	}
	res.Done = true
	return res, nil
}

// partitionReplay is one ReplayPartition activity: its sink, graph,
// archive and bounds.
type partitionReplay struct {
	in                            ReplayPartitionInput
	sink                          streaming.Sink
	graph                         ReplayGraph
	arc                           parquet.Archive
	prefix                        string
	maxFiles, batchRows, beatRows int
	batch                         []streaming.Output
}

// one replays partition from res.Next, adding to res and heartbeating it,
// until the partition ends or (stopped) the activity read maxFiles files.
func (rp *partitionReplay) one(ctx context.Context, partition string, res *ReplayPartitionResult) (stopped bool, _ error) {
	in := rp.in
	// A file counts (Files, Bytes) when the reader starts it, also one
	// whose rows earlier files all cover (it yields no row, and
	// CountArchive counts it): reached counts the files started since
	// the last row read, added to pending with the next file's first row
	// or at the partition's end. file is the last file a row was read
	// from (the resume position's, counted by the attempt or activity
	// that read into it), which the reader starts again on a resume.
	file := res.Next.File
	var reached replayCounts
	onFile := func(fi parquet.FileInfo) {
		if fi.Name == file {
			return
		}
		reached.Files++
		reached.Bytes += fi.NewBytes()
		// A new file, as a batch written: heartbeat what is durable, for
		// files whose rows the time range skips, or earlier files cover,
		// write nothing and may take longer than the heartbeat timeout
		// to read.
		activity.RecordHeartbeat(ctx, *res)
	}
	r, err := parquet.NewReader(rp.arc, rp.prefix+partition, parquet.WithExpectedFingerprint(expected(in.ExpectedFingerprint)),
		parquet.WithOnFile(onFile))
	if err != nil {
		return false, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	if rp.batch == nil {
		rp.batch = make([]streaming.Output, 0, rp.batchRows)
	}
	emit := func(row parquet.Row) { rp.batch = append(rp.batch, row.Output()) }
	var pending replayCounts // rows read since the last flush
	write := func() error {
		if len(rp.batch) == 0 {
			return nil
		}
		if err := rp.sink.Write(ctx, rp.batch); err != nil {
			return err
		}
		pending.Written += int64(len(rp.batch))
		rp.batch = rp.batch[:0]
		// Between flushes, heartbeat what the last flush made durable:
		// the activity stays alive however slow the sink is (HeartbeatRows
		// rows may take longer than the heartbeat timeout, and an attempt
		// timed out before it flushed would start over from the same
		// position, forever), and learns of a cancellation sooner.
		activity.RecordHeartbeat(ctx, *res)
		return nil
	}
	next := res.Next
	flush := func() error {
		if err := write(); err != nil {
			return err
		}
		if err := rp.sink.Flush(ctx, "", 0); err != nil {
			return err
		}
		res.Next = next
		// Stopped at MaxFiles, the flush heartbeats that it stops.
		res.Stopping = stopped
		res.Files += pending.Files
		res.Bytes += pending.Bytes
		res.Rows += pending.Rows
		res.Written += pending.Written
		res.Skipped += pending.Skipped
		pending = replayCounts{}
		activity.RecordHeartbeat(ctx, *res)
		return nil
	}
	sinceBeat := 0
	for e, err := range r.All(ctx, res.Next) {
		if err != nil {
			return false, classifyArchive(in.Location, err)
		}
		if e.Pos.File != file {
			// Covered files reached since are left to the next activity,
			// which resumes before them (and does not count them in its
			// bound, so it cannot stop before any row for ever).
			if file != "" && res.Files+pending.Files >= rp.maxFiles {
				stopped = true
				break
			}
			file = e.Pos.File
			pending.Files += reached.Files
			pending.Bytes += reached.Bytes
			reached = replayCounts{}
		}
		pending.Rows++
		next = e.Pos.Next()
		ts := time.Unix(0, e.Row.TS)
		switch {
		case (!in.From.IsZero() && ts.Before(in.From)) || (!in.To.IsZero() && !ts.Before(in.To)):
			pending.Skipped++
		case rp.graph != nil:
			rp.graph.Apply(e.Row, emit)
		default:
			emit(e.Row)
		}
		if len(rp.batch) >= rp.batchRows {
			if err := write(); err != nil {
				return false, sinkErr(fmt.Errorf("replay %s at %s row %d: %w", partition, e.Pos.File, e.Pos.Row, err))
			}
		}
		if sinceBeat++; sinceBeat >= rp.beatRows {
			sinceBeat = 0
			if err := flush(); err != nil {
				return false, sinkErr(fmt.Errorf("replay %s at %s row %d: %w", partition, e.Pos.File, e.Pos.Row, err))
			}
		}
	}
	if !stopped {
		// Covered files at the partition's end.
		pending.Files += reached.Files
		pending.Bytes += reached.Bytes
	}
	if err := flush(); err != nil {
		return false, sinkErr(fmt.Errorf("replay %s: %w", partition, err))
	}
	return stopped, nil
}

// sinkAndGraph resolves a replay's sink and graph names.
func (a *Backfills) sinkAndGraph(sinkName, graphName string) (streaming.Sink, ReplayGraph, error) {
	if a.Sinks == nil {
		return nil, nil, temporal.NewNonRetryableApplicationError("backfill activities have no sinks registered", ErrTypeBadInput, nil)
	}
	sink, err := a.Sinks(sinkName)
	if errors.Is(err, ErrSinkUnavailable) {
		return nil, nil, fmt.Errorf("sink %q: %w", sinkName, err)
	}
	if err != nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("sink %q: %v", sinkName, err), ErrTypeBadInput, nil)
	}
	if graphName == "" {
		return sink, nil, nil
	}
	if a.Graphs == nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("graph %q: no graphs registered", graphName), ErrTypeBadInput, nil)
	}
	g, err := a.Graphs(graphName)
	if err != nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("graph %q: %v", graphName, err), ErrTypeBadInput, nil)
	}
	return sink, g, nil
}

// replayCounts are the counts a replay gathers between two flushes.
type replayCounts struct {
	Files                         int
	Bytes, Rows, Written, Skipped int64
}
