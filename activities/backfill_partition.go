package activities

import (
	"context"
	"errors"
	"fmt"
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

// ArchiveTotals is the size of an archive, from its listing.
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
			c.Part, c.First = p, fi.Name
			t.Partitions++
		}
		t.Files++
		t.Bytes += fi.Size
		c.Last = fi.Name
		// Each check reads two footers (round trips on an object store):
		// heartbeat per partition, not per 10,000 files (the SDK
		// throttles the calls).
		if newPart || t.Files%10000 == 0 {
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

// ReplayPartitionInput replays part of one partition: from Start, files
// in order, until MaxFiles files were read or the partition ends.
type ReplayPartitionInput struct {
	Location            string `json:"location"`
	Partition           string `json:"partition"`
	ExpectedFingerprint string `json:"expected_fingerprint,omitempty"`
	// Start is where the previous activity of this partition stopped
	// (zero: the partition's start).
	Start parquet.Position `json:"start"`
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

// ReplayPartitionResult reports one activity's replay of a partition.
type ReplayPartitionResult struct {
	Partition string `json:"partition"`
	// Next is where the partition's next activity starts; Done: nothing
	// is left.
	Next parquet.Position `json:"next"`
	Done bool             `json:"done"`
	// Files read (counted when the reader starts them, also those whose
	// rows earlier files all cover), their Bytes,
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
// files. A schema mismatch is non-retryable and names the file and both
// fingerprints.
func (a *Backfills) ReplayPartition(ctx context.Context, in ReplayPartitionInput) (ReplayPartitionResult, error) {
	if in.Partition == "" || in.Sink == "" {
		return ReplayPartitionResult{}, temporal.NewNonRetryableApplicationError("replay partition: partition and sink are required", ErrTypeBadInput, nil)
	}
	sink, graph, err := a.sinkAndGraph(in.Sink, in.Graph)
	if err != nil {
		return ReplayPartitionResult{}, err
	}
	arc, prefix, err := a.archive(in.Location)
	if err != nil {
		return ReplayPartitionResult{}, err
	}
	maxFiles, batchRows, beatRows := in.MaxFiles, in.BatchRows, in.HeartbeatRows
	if maxFiles <= 0 {
		maxFiles = 256
	}
	if batchRows <= 0 {
		batchRows = 10_000
	}
	if beatRows <= 0 {
		beatRows = 100_000
	}
	res := ReplayPartitionResult{Partition: in.Partition, Next: in.Start}
	if activity.HasHeartbeatDetails(ctx) {
		var hb ReplayPartitionResult
		if err := activity.GetHeartbeatDetails(ctx, &hb); err == nil && hb.Partition == in.Partition {
			res, res.Resumed = hb, true
		}
	}
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
		reached.Bytes += fi.Size
		// A new file, as a batch written: heartbeat what is durable, for
		// files whose rows the time range skips, or earlier files cover,
		// write nothing and may take longer than the heartbeat timeout
		// to read.
		activity.RecordHeartbeat(ctx, res)
	}
	r, err := parquet.NewReader(arc, prefix+in.Partition, parquet.WithExpectedFingerprint(expected(in.ExpectedFingerprint)),
		parquet.WithOnFile(onFile))
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	batch := make([]streaming.Output, 0, batchRows)
	emit := func(row parquet.Row) { batch = append(batch, row.Output()) }
	var pending replayCounts // rows read since the last flush
	write := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := sink.Write(ctx, batch); err != nil {
			return err
		}
		pending.Written += int64(len(batch))
		batch = batch[:0]
		// Between flushes, heartbeat what the last flush made durable:
		// the activity stays alive however slow the sink is (HeartbeatRows
		// rows may take longer than the heartbeat timeout, and an attempt
		// timed out before it flushed would start over from the same
		// position, forever), and learns of a cancellation sooner.
		activity.RecordHeartbeat(ctx, res)
		return nil
	}
	next := res.Next
	flush := func() error {
		if err := write(); err != nil {
			return err
		}
		if err := sink.Flush(ctx, "", 0); err != nil {
			return err
		}
		res.Next = next
		res.Files += pending.Files
		res.Bytes += pending.Bytes
		res.Rows += pending.Rows
		res.Written += pending.Written
		res.Skipped += pending.Skipped
		pending = replayCounts{}
		activity.RecordHeartbeat(ctx, res)
		return nil
	}
	sinceBeat := 0
	stopped := false
	for e, err := range r.All(ctx, res.Next) {
		if err != nil {
			return res, classifyArchive(in.Location, err)
		}
		if e.Pos.File != file {
			// Covered files reached since are left to the next activity,
			// which resumes before them (and does not count them in its
			// bound, so it cannot stop before any row for ever).
			if file != "" && res.Files+pending.Files >= maxFiles {
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
		case graph != nil:
			graph.Apply(e.Row, emit)
		default:
			emit(e.Row)
		}
		if len(batch) >= batchRows {
			if err := write(); err != nil {
				return res, sinkErr(fmt.Errorf("replay %s at %s row %d: %w", in.Partition, e.Pos.File, e.Pos.Row, err))
			}
		}
		if sinceBeat++; sinceBeat >= beatRows {
			sinceBeat = 0
			if err := flush(); err != nil {
				return res, sinkErr(fmt.Errorf("replay %s at %s row %d: %w", in.Partition, e.Pos.File, e.Pos.Row, err))
			}
		}
	}
	if !stopped {
		// Covered files at the partition's end.
		pending.Files += reached.Files
		pending.Bytes += reached.Bytes
	}
	if err := flush(); err != nil {
		return res, sinkErr(fmt.Errorf("replay %s: %w", in.Partition, err))
	}
	res.Done = !stopped
	return res, nil
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
