package parquet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// CompactPolicy says which committed files Compact rewrites. The zero
// value is not useful; start from DefaultCompactPolicy.
type CompactPolicy struct {
	// TargetSize is the size Compact aims its output files at (inputs
	// are gathered until their sizes add up to it). At most 5 GiB.
	TargetSize int64 `json:"target_size"`
	// SmallFile: only files smaller than this are rewritten.
	SmallFile int64 `json:"small_file"`
	// MinAge: only files written at least this long ago are rewritten,
	// so the newest files of a busy shard wait and a quiet shard's are
	// all taken. 0 takes every small file.
	MinAge time.Duration `json:"min_age"`
	// DryRun plans without writing or deleting anything.
	DryRun bool `json:"dry_run,omitempty"`
}

// DefaultCompactPolicy: 128 MiB outputs, files under 32 MiB, older than
// an hour.
func DefaultCompactPolicy() CompactPolicy {
	return CompactPolicy{TargetSize: 128 << 20, SmallFile: 32 << 20, MinAge: time.Hour}
}

// Validate reports the first problem with p, as a sentence.
func (p CompactPolicy) Validate() error {
	switch {
	case p.TargetSize < 1 || p.TargetSize > maxFileSize:
		return fmt.Errorf("compaction target size %d is outside 1 byte..5 GiB", p.TargetSize)
	case p.SmallFile < 1 || p.SmallFile > p.TargetSize:
		return fmt.Errorf("compaction small-file size %d is outside 1 byte..the target size %d", p.SmallFile, p.TargetSize)
	case p.MinAge < 0:
		return fmt.Errorf("compaction minimum age %v is negative", p.MinAge)
	}
	return nil
}

// CompactRun is one group of files rewritten as one.
type CompactRun struct {
	Inputs   []string `json:"inputs"`
	Output   string   `json:"output"`
	Rows     int64    `json:"rows"`
	BytesIn  int64    `json:"bytes_in"`
	BytesOut int64    `json:"bytes_out"`
}

// CompactResult reports a compaction.
type CompactResult struct {
	Shards int          `json:"shards"`
	Files  int          `json:"files"` // files listed
	Runs   []CompactRun `json:"runs,omitempty"`
	// Redundant lists the files deleted because another file covers their
	// whole offset range (a compaction interrupted before it deleted its
	// inputs, or replays of an older archive writer); in a dry run, those
	// that would be.
	Redundant []string `json:"redundant,omitempty"`
	// StaleTempFiles counts the temp files crashed writers left in a
	// local archive's folders, deleted (LocalArchive.SweepTemps; not in
	// a dry run).
	StaleTempFiles int `json:"stale_temp_files,omitempty"`
	// StaleTempSweepStopped: that sweep stopped at its time budget
	// (TempSweepBudget), StaleTempFiles deleted until then; the rest waits
	// for the next compaction.
	StaleTempSweepStopped bool `json:"stale_temp_sweep_stopped,omitempty"`
	DryRun                bool `json:"dry_run,omitempty"`
}

// compactStaging is the hidden folder compaction builds its outputs in.
func compactStaging(pipeline string, shard int32) string {
	return fmt.Sprintf("%s/compact/%s/shard-%06d/", StagingDir, pipeline, shard)
}

// Compact rewrites runs of small committed files under prefix into large
// files, shard by shard, and deletes files another file fully covers.
// Each output holds the rows of its inputs (as the reader reads them:
// rows an earlier file already holds are dropped) in order, is named by
// the inputs' whole offset range and highest epoch, and is published
// with one atomic move before its inputs are deleted. A reader listing
// the archive meanwhile sees the output beside some inputs and reads
// each row once (the output sorts after the first input and covers the
// others, see the package doc); a reader whose file was deleted under it
// lists again and resumes by offset (Reader.All). Files are checked
// (checksum, fingerprint expected) as they are read; a bad file stops
// the compaction with an error naming it and nothing of its run is
// changed.
//
// It also deletes the stale temp files crashed writers left anywhere in
// a local archive (LocalArchive.SweepTemps).
//
// Run one compaction at a time per archive: a crash leaves an output
// beside its inputs (the next compaction deletes the covered inputs) or
// an unfinished upload in the hidden compaction folder, which the next
// compaction discards. The archive must implement Uploader, Mover and
// Deleter.
func Compact(ctx context.Context, a Archive, prefix, expected string, p CompactPolicy, now time.Time) (CompactResult, error) {
	res := CompactResult{DryRun: p.DryRun}
	if err := p.Validate(); err != nil {
		return res, err
	}
	up, ok1 := a.(Uploader)
	mv, ok2 := a.(Mover)
	del, ok3 := a.(Deleter)
	if !ok1 || !ok2 || !ok3 {
		return res, fmt.Errorf("compact: archive %T cannot upload in parts, move and delete objects", a)
	}
	if expected == "" {
		expected = SchemaFingerprint()
	}
	c := &compactor{a: a, up: up, mv: mv, del: del, p: p, now: now, expected: expected}
	if !p.DryRun {
		if err := c.sweepStaging(ctx); err != nil {
			return res, err
		}
		if ts, ok := a.(tempSweeper); ok {
			// Best effort: a sweep cut short by its time budget goes on
			// at the next compaction. Its only other error is ctx's,
			// which the compaction meets next.
			n, err := ts.SweepTemps(ctx)
			res.StaleTempFiles, res.StaleTempSweepStopped = n, err != nil && ctx.Err() == nil
		}
	}
	var shard []FileInfo
	flush := func() error {
		if len(shard) == 0 {
			return nil
		}
		res.Shards++
		err := c.shard(ctx, shard, &res)
		shard = shard[:0]
		return err
	}
	for fi, err := range archiveFiles(ctx, a, prefix, "") {
		if err != nil {
			return res, fmt.Errorf("compact: %w", err)
		}
		res.Files++
		if len(shard) > 0 && !sameShard(shard[0].Key, fi.Key) {
			if err := flush(); err != nil {
				return res, err
			}
		}
		shard = append(shard, fi)
	}
	return res, flush()
}

// tempSweeper is an archive whose crashed writers leave temp files
// (LocalArchive).
type tempSweeper interface {
	SweepTemps(ctx context.Context) (int, error)
}

// compactAbortTimeout bounds the abort of a failed compaction's upload.
var compactAbortTimeout = 10 * time.Second

type compactor struct {
	a        Archive
	up       Uploader
	mv       Mover
	del      Deleter
	p        CompactPolicy
	now      time.Time
	expected string
}

// sweepStaging discards what an interrupted compaction left in its
// hidden folder.
func (c *compactor) sweepStaging(ctx context.Context) error {
	dir := StagingDir + "/compact/"
	if ul, ok := c.a.(UploadLister); ok {
		ups, err := ul.ListUploads(ctx, dir)
		if err != nil {
			return fmt.Errorf("compact: %w", err)
		}
		for _, u := range ups {
			if err := c.up.AbortUpload(ctx, u.Name, u.ID); err != nil {
				return fmt.Errorf("compact: %w", err)
			}
		}
	}
	objs, err := c.a.List(ctx, dir)
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = o.Name
	}
	if err := c.del.Delete(ctx, names...); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	return nil
}

// shard compacts one shard's files (in name order).
func (c *compactor) shard(ctx context.Context, files []FileInfo, res *CompactResult) error {
	// Redundant files: another covers their whole range (sorted by first
	// ascending, then widest and newest first, a file is covered when an
	// earlier one reaches as far).
	order := slices.Clone(files)
	slices.SortStableFunc(order, func(x, y FileInfo) int {
		switch {
		case x.Key.First != y.Key.First:
			return cmp.Compare(x.Key.First, y.Key.First)
		case x.Key.Last != y.Key.Last:
			return cmp.Compare(y.Key.Last, x.Key.Last)
		}
		return cmp.Compare(y.Key.Epoch, x.Key.Epoch)
	})
	covered := map[string]bool{}
	reach := int64(-1)
	for i, f := range order {
		if i > 0 && f.Key.Last <= reach {
			covered[f.Name] = true
			continue
		}
		reach = max(reach, f.Key.Last)
	}
	var live []FileInfo
	var redundant []string
	for _, f := range files {
		if covered[f.Name] {
			redundant = append(redundant, f.Name)
		} else {
			live = append(live, f)
		}
	}
	if len(redundant) > 0 {
		if !c.p.DryRun {
			if err := c.del.Delete(ctx, redundant...); err != nil {
				return fmt.Errorf("compact: delete covered files: %w", err)
			}
		}
		res.Redundant = append(res.Redundant, redundant...)
	}
	names := map[string]bool{}
	for _, f := range files {
		names[f.Name] = true
	}
	// Runs of consecutive small, old files up to the target size.
	small := func(f FileInfo) bool {
		return f.Size < c.p.SmallFile && (c.p.MinAge == 0 || !f.ModTime.IsZero() && c.now.Sub(f.ModTime) >= c.p.MinAge)
	}
	skip := int64(-1) // highest offset the files before the current one cover
	for i := 0; i < len(live); {
		if !small(live[i]) {
			skip = max(skip, live[i].Key.Last)
			i++
			continue
		}
		j, size := i, int64(0)
		for j < len(live) && small(live[j]) && (j == i || size+live[j].Size <= c.p.TargetSize) {
			size += live[j].Size
			j++
		}
		run := live[i:j]
		if len(run) >= 2 {
			if err := c.run(ctx, run, skip, names, res); err != nil {
				return err
			}
		}
		for _, f := range run {
			skip = max(skip, f.Key.Last)
		}
		i = j
	}
	return nil
}

// run rewrites files (of one shard, in order; skip is the highest offset
// earlier files cover) as one file.
func (c *compactor) run(ctx context.Context, files []FileInfo, skip int64, names map[string]bool, res *CompactResult) error {
	out := FileKey{Pipeline: files[0].Key.Pipeline, Shard: files[0].Key.Shard, First: files[0].Key.First}
	cr := CompactRun{}
	for _, f := range files {
		out.Last = max(out.Last, f.Key.Last)
		out.Epoch = max(out.Epoch, f.Key.Epoch)
		cr.Inputs = append(cr.Inputs, f.Name)
		cr.BytesIn += f.Size
	}
	cr.Output = out.Name()
	if names[cr.Output] {
		return nil // an input already has the output's name and range: nothing to merge into
	}
	if c.p.DryRun {
		res.Runs = append(res.Runs, cr)
		return nil
	}
	r := &Reader{archive: c.a, cfg: defaultReaderConfig()}
	r.cfg.expected = c.expected
	cfg := defaultWriterConfig()
	b := newFileBuilder(cfg)
	u := uploadInfo{Staging: compactStaging(out.Pipeline, out.Shard) + strings.TrimSuffix(out.Name()[strings.LastIndex(out.Name(), "/")+1:], ".parquet") + ".inprogress"}
	pending := append([]byte(nil), b.start()...)
	batch := make([]Row, 0, cfg.rowGroupRows)
	flushRows := func() error {
		if len(batch) == 0 {
			return nil
		}
		body, err := b.appendRows(batch)
		if err != nil {
			return err
		}
		pending = append(pending, body...)
		batch = batch[:0]
		_, err = uploadPending(ctx, c.up, &u, &pending, max(cfg.partSize, c.up.MinPartSize()))
		return err
	}
	abort := func(err error) error {
		if u.UploadID != "" {
			// Also after the caller gave up, but not for ever: a store
			// that stopped answering would hold the caller (a shutdown)
			// with no deadline, and the next compaction discards what
			// this abort does not (sweepStaging).
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compactAbortTimeout)
			_ = c.up.AbortUpload(actx, u.Staging, u.UploadID)
			cancel()
		}
		return fmt.Errorf("compact %s: %w", cr.Output, err)
	}
	for i, f := range files {
		f.SkipThrough = skip
		if i > 0 {
			f.SkipThrough = max(skip, files[i-1].SkipThrough, files[i-1].Key.Last)
		}
		files[i].SkipThrough = f.SkipThrough
		for e, err := range r.File(ctx, f, 0) {
			if err != nil {
				return abort(err)
			}
			batch = append(batch, e.Row)
			if int64(len(batch)) == cfg.rowGroupRows {
				if err := flushRows(); err != nil {
					return abort(err)
				}
			}
		}
	}
	if err := flushRows(); err != nil {
		return abort(err)
	}
	if b.state().Rows == 0 {
		return abort(errors.New("the inputs hold no row"))
	}
	tail, err := b.footer()
	if err != nil {
		return abort(err)
	}
	pending = append(pending, tail...)
	if _, err := uploadPending(ctx, c.up, &u, &pending, 0); err != nil {
		return abort(err)
	}
	if err := completeUpload(ctx, c.up, u); err != nil {
		return abort(err)
	}
	if err := c.mv.Move(ctx, u.Staging, cr.Output); err != nil {
		return fmt.Errorf("compact %s: %w", cr.Output, err)
	}
	// The output is visible and covers every input: the inputs can go.
	if err := c.del.Delete(ctx, cr.Inputs...); err != nil {
		return fmt.Errorf("compact %s: published; deleting its inputs: %w (the next compaction deletes them)", cr.Output, err)
	}
	cr.Rows, cr.BytesOut = b.state().Rows, b.state().Size
	res.Runs = append(res.Runs, cr)
	return nil
}
