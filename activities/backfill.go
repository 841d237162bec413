package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/streaming"
)

// ArchiveFile is one file of a backfill plan, as workflow history carries
// it: a name and counts, never rows.
type ArchiveFile struct {
	Name string `json:"name"`
	Rows int64  `json:"rows"`
	Size int64  `json:"size"`
}

// ListArchiveInput asks for the plan of an archive location.
type ListArchiveInput struct {
	// Location is "file:///abs/dir" or "s3://bucket/prefix" (see
	// internal/archiveloc), or a scheme the worker registered.
	Location string `json:"location"`
	// ExpectedFingerprint is the schema fingerprint the files must carry
	// (default: the fingerprint of this build's archive schema).
	ExpectedFingerprint string `json:"expected_fingerprint,omitempty"`
}

// ListArchiveResult is the plan: files in replay order.
type ListArchiveResult struct {
	Files     []ArchiveFile `json:"files"`
	TotalRows int64         `json:"total_rows"`
}

// ReplayFileInput replays one archive file through a graph into a sink.
type ReplayFileInput struct {
	Location            string `json:"location"`
	File                string `json:"file"`
	ExpectedFingerprint string `json:"expected_fingerprint,omitempty"`
	// From and To bound the rows' event time, [From, To); zero is open.
	From time.Time `json:"from,omitempty"`
	To   time.Time `json:"to,omitempty"`
	// Graph names the replay graph the worker registered ("" = identity).
	Graph string `json:"graph,omitempty"`
	// Sink names the sink the worker registered.
	Sink string `json:"sink"`
	// BatchRows rows are written and flushed between heartbeats (default 1000).
	BatchRows int `json:"batch_rows,omitempty"`
}

// ReplayFileResult reports one replayed file.
type ReplayFileResult struct {
	File string `json:"file"`
	// Rows read, Written to the sink, Skipped by the time range (over
	// every attempt of the activity).
	Rows    int64 `json:"rows"`
	Written int64 `json:"written"`
	Skipped int64 `json:"skipped"`
	// ResumedAt is the row the attempt resumed from (0 on a first attempt).
	ResumedAt int64 `json:"resumed_at"`
}

// ReplayGraph turns one archived row into the rows written to the sink
// (the same operator graph the live pipeline runs, for example).
// Backfills.Graphs is called at the start of every replay activity (a
// file, a partition's next 256 files, or a retry of either), which may
// run at once on a worker: return a new graph each time. A stateful
// graph then starts empty at each activity, so its outputs there lack
// the history before it; give graphs whose state needs no longer
// history than one activity replays.
type ReplayGraph interface {
	Apply(row parquet.Row, emit func(parquet.Row))
}

// ErrSinkUnavailable is wrapped by an error of Backfills.Sinks when the
// sink could not be opened for a passing reason (its server did not
// answer, or answered with an error of its own): the replay is retried.
var ErrSinkUnavailable = errors.New("sink unavailable")

// Backfills are the backfill workflow's activities. Archives resolves a
// location to an archive and a name prefix (default: file:// and s3://
// through internal/archiveloc, S3 settings from the TFLO_S3_* variables);
// Sinks and Graphs resolve names registered by the worker.
type Backfills struct {
	Archives func(location string) (parquet.Archive, string, error)
	// Sinks resolves a sink name to one of the pipeline's sinks (the one
	// Sink contract): replayed rows are written as the outputs they were
	// archived from (parquet.Row.Output), so a sink writes them as it
	// writes live outputs. Writes must be idempotent (a retried batch
	// overwrites, as Influx points keyed by series and time do); Flush(ctx,
	// "", 0) returns once everything written is durable.
	//
	// An error of Sinks fails the backfill (an unknown or refused name),
	// unless it wraps ErrSinkUnavailable: the sink could not be opened
	// for a passing reason, and the replay is retried.
	Sinks  func(name string) (streaming.Sink, error)
	Graphs func(name string) (ReplayGraph, error)

	once     sync.Once
	defaults func(location string) (parquet.Archive, string, error)
}

func (a *Backfills) archive(location string) (parquet.Archive, string, error) {
	resolve := a.Archives
	if resolve == nil {
		a.once.Do(func() {
			c, err := archiveloc.S3FromEnv(os.LookupEnv)
			if err != nil {
				a.defaults = func(string) (parquet.Archive, string, error) { return nil, "", err }
				return
			}
			a.defaults = archiveloc.Resolver(c)
		})
		resolve = a.defaults
	}
	arc, prefix, err := resolve(location)
	if err != nil {
		return nil, "", temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	return arc, prefix, nil
}

func expected(fp string) string {
	if fp == "" {
		return parquet.SchemaFingerprint()
	}
	return fp
}

// ListArchive plans a backfill: the archive's files in replay order. A
// file whose schema fingerprint differs from the expected one fails the
// whole plan with a non-retryable SchemaMismatch error naming the file and
// both fingerprints. It returns every file in one result (about 8,500
// names fit a payload): kept for backfills started before the
// partition-paged workflow; new runs use CountArchive, ListPartitions and
// ReplayPartition.
func (a *Backfills) ListArchive(ctx context.Context, in ListArchiveInput) (ListArchiveResult, error) {
	arc, prefix, err := a.archive(in.Location)
	if err != nil {
		return ListArchiveResult{}, err
	}
	r, err := parquet.NewReader(arc, prefix, parquet.WithExpectedFingerprint(expected(in.ExpectedFingerprint)))
	if err != nil {
		return ListArchiveResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	plan, err := r.Plan(ctx)
	if err != nil {
		return ListArchiveResult{}, classifyArchive(in.Location, err)
	}
	var out ListArchiveResult
	for _, fi := range plan {
		out.Files = append(out.Files, ArchiveFile{Name: fi.Name, Rows: fi.Rows, Size: fi.Size})
		out.TotalRows += fi.Rows
	}
	return out, nil
}

// ReplayFile replays one file from the row its last heartbeat recorded
// (kept for backfills started before ReplayPartition).
// Rows are written in batches; after each batch is flushed the activity
// heartbeats the next row and its counts so far, so a retry resumes after
// the last durable batch (rows written twice are overwritten by the
// idempotent sink) and its result counts the rows of every attempt.
func (a *Backfills) ReplayFile(ctx context.Context, in ReplayFileInput) (ReplayFileResult, error) {
	if in.File == "" || in.Sink == "" {
		return ReplayFileResult{}, temporal.NewNonRetryableApplicationError("replay file: file and sink are required", ErrTypeBadInput, nil)
	}
	sink, graph, err := a.sinkAndGraph(in.Sink, in.Graph)
	if err != nil {
		return ReplayFileResult{}, err
	}
	arc, prefix, err := a.archive(in.Location)
	if err != nil {
		return ReplayFileResult{}, err
	}
	batchRows := in.BatchRows
	if batchRows <= 0 {
		batchRows = 1000
	}

	res := ReplayFileResult{File: in.File}
	if activity.HasHeartbeatDetails(ctx) {
		var hb ReplayFileProgress
		if err := activity.GetHeartbeatDetails(ctx, &hb); err == nil && hb.File == in.File {
			// The counts of the rows before the position, flushed by the
			// earlier attempts (0 from a build that heartbeated the
			// position alone: those rows are not counted).
			res.ResumedAt = hb.Row
			res.Rows, res.Written, res.Skipped = hb.Rows, hb.Written, hb.Skipped
		}
	}

	r, err := parquet.NewReader(arc, prefix, parquet.WithExpectedFingerprint(expected(in.ExpectedFingerprint)))
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadInput, nil)
	}
	plan, err := r.Plan(ctx)
	if err != nil {
		return res, classifyArchive(in.Location, err)
	}
	var fi *parquet.FileInfo
	for i := range plan {
		if plan[i].Name == in.File {
			fi = &plan[i]
			break
		}
	}
	if fi == nil {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("archive %s has no file %q", in.Location, in.File), ErrTypeBadInput, nil)
	}

	batch := make([]streaming.Output, 0, batchRows)
	next := res.ResumedAt
	flush := func() error {
		if len(batch) > 0 {
			if err := sink.Write(ctx, batch); err != nil {
				return err
			}
			res.Written += int64(len(batch))
			batch = batch[:0]
		}
		if err := sink.Flush(ctx, "", 0); err != nil {
			return err
		}
		activity.RecordHeartbeat(ctx, ReplayFileProgress{Position: parquet.Position{File: in.File, Row: next},
			Rows: res.Rows, Written: res.Written, Skipped: res.Skipped})
		return nil
	}
	emit := func(row parquet.Row) { batch = append(batch, row.Output()) }
	read := int64(0)
	for e, err := range r.File(ctx, *fi, res.ResumedAt) {
		if err != nil {
			return res, classifyArchive(in.Location, err)
		}
		res.Rows++
		read++
		next = e.Pos.Row + 1
		ts := time.Unix(0, e.Row.TS)
		if (!in.From.IsZero() && ts.Before(in.From)) || (!in.To.IsZero() && !ts.Before(in.To)) {
			res.Skipped++
		} else if graph != nil {
			graph.Apply(e.Row, emit)
		} else {
			emit(e.Row)
		}
		if read%int64(batchRows) == 0 {
			if err := flush(); err != nil {
				return res, sinkErr(fmt.Errorf("replay %s row %d: %w", in.File, next, err))
			}
		}
	}
	if err := flush(); err != nil {
		return res, sinkErr(fmt.Errorf("replay %s row %d: %w", in.File, next, err))
	}
	return res, nil
}

// ReplayFileProgress is what ReplayFile heartbeats after each flush: the
// next row, and the counts of the rows before it, so a retry resuming
// there reports every attempt's rows (before, it heartbeated the position
// alone and its result lacked the rows flushed before the retry). The
// position's fields are at the top level, as the position alone was
// heartbeated before: either build reads the other's heartbeat. (starter
// backfill status reads it too, to show where a replay stands.)
type ReplayFileProgress struct {
	parquet.Position
	Rows    int64 `json:"rows,omitempty"`
	Written int64 `json:"written,omitempty"`
	Skipped int64 `json:"skipped,omitempty"`
}

// sinkErr is a replay's failed sink Write or Flush: non-retryable
// (ErrTypeSinkFailed) when the sink failed for good (it wraps
// streaming.ErrSinkFailed: refused credentials, a missing bucket), as
// every retry would fail the same way; else retried.
func sinkErr(err error) error {
	if errors.Is(err, streaming.ErrSinkFailed) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeSinkFailed, nil)
	}
	return err
}

// classifyArchive makes schema mismatches, bad names and corrupt files
// non-retryable and keeps the message that names the file (and both
// fingerprints).
func classifyArchive(location string, err error) error {
	if errors.Is(err, parquet.ErrSchemaMismatch) {
		return temporal.NewNonRetryableApplicationError(strings.TrimSpace("archive "+location+": "+err.Error()), ErrTypeSchemaMismatch, nil)
	}
	if errors.Is(err, parquet.ErrBadName) {
		return temporal.NewNonRetryableApplicationError("archive "+location+": "+err.Error(), ErrTypeBadInput, nil)
	}
	if errors.Is(err, streaming.ErrCorrupt) {
		return temporal.NewNonRetryableApplicationError("archive "+location+": "+err.Error(), ErrTypeCorrupt, nil)
	}
	return err
}
