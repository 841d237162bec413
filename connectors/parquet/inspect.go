package parquet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go/format"
)

// PartitionSummary describes one shard's files in the archive.
type PartitionSummary struct {
	Pipeline string `json:"pipeline"`
	Shard    int32  `json:"shard"`
	Files    int    `json:"files"`
	Rows     int64  `json:"rows"`
	Bytes    int64  `json:"bytes"`
	// FirstOffset and LastOffset are the source offsets the files cover.
	FirstOffset int64 `json:"first_offset"`
	LastOffset  int64 `json:"last_offset"`
	// MinTS and MaxTS bound the rows' event time (unix nanoseconds),
	// from the files' column statistics.
	MinTS int64 `json:"min_ts"`
	MaxTS int64 `json:"max_ts"`
	// Codecs names the codecs the files' pages are compressed with
	// (zstd, snappy; sorted), from their footers: a shard whose writer
	// changed compression holds both until compaction rewrites its small
	// files (in zstd).
	Codecs []string `json:"codecs,omitempty"`
	// Staged counts the shard's working objects in StagingDir: files not
	// yet published, their row-group and tail segments, pre-commit
	// records.
	Staged int `json:"staged,omitempty"`
}

// Summary describes an archive: its partitions and their totals.
type Summary struct {
	Partitions []PartitionSummary `json:"partitions"`
	Files      int                `json:"files"`
	Rows       int64              `json:"rows"`
	Bytes      int64              `json:"bytes"`
	MinTS      int64              `json:"min_ts"`
	MaxTS      int64              `json:"max_ts"`
	// Problems lists files whose footer could not be read (each names
	// the file); they are counted in Files and Bytes only.
	Problems []string `json:"problems,omitempty"`
}

// Summarize lists the archive under prefix and reads every file's footer
// (concurrency at a time): rows, offsets and event-time range per
// partition. It reads no row.
func Summarize(ctx context.Context, a Archive, prefix string, concurrency int) (Summary, error) {
	var s Summary
	parts := map[string]*PartitionSummary{}
	var order []string
	part := func(k FileKey) *PartitionSummary {
		id := ShardPrefix(k.Pipeline, k.Shard)
		p := parts[id]
		if p == nil {
			p = &PartitionSummary{Pipeline: k.Pipeline, Shard: k.Shard, FirstOffset: -1, LastOffset: -1}
			parts[id] = p
			order = append(order, id)
		}
		return p
	}
	type job struct {
		key  FileKey
		name string
	}
	var jobs []job
	for fi, err := range archiveFiles(ctx, a, prefix, "") {
		if err != nil {
			return s, fmt.Errorf("summarize the archive: %w", err)
		}
		k := fi.Key
		p := part(k)
		p.Files++
		p.Bytes += fi.Size
		if p.FirstOffset < 0 || k.First < p.FirstOffset {
			p.FirstOffset = k.First
		}
		p.LastOffset = max(p.LastOffset, k.Last)
		jobs = append(jobs, job{k, fi.Name})
	}
	// Staged objects per shard.
	staged, err := a.List(ctx, StagingDir+"/staging/")
	if err != nil {
		return s, fmt.Errorf("summarize the archive: %w", err)
	}
	for _, o := range staged {
		// A shard whose first file is still open has staged objects
		// and no published file yet: it is listed all the same.
		if k, ok := stagedShard(strings.TrimPrefix(o.Name, StagingDir+"/staging/")); ok && strings.HasPrefix(ShardPrefix(k.Pipeline, k.Shard), prefix) {
			part(k).Staged++
		}
	}
	slices.Sort(order) // zero-padded shard numbers: by pipeline, then shard
	type footer struct {
		rows       int64
		minTS, max int64
		codecs     []string
		err        error
	}
	results := make([]footer, len(jobs))
	sem := make(chan struct{}, max(concurrency, 1))
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rows, lo, hi, codecs, err := fileStats(ctx, a, j.name)
			results[i] = footer{rows, lo, hi, codecs, err}
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		p := part(j.key)
		r := results[i]
		if r.err != nil {
			s.Problems = append(s.Problems, r.err.Error())
			continue
		}
		for _, c := range r.codecs {
			if !slices.Contains(p.Codecs, c) {
				p.Codecs = append(p.Codecs, c)
				slices.Sort(p.Codecs)
			}
		}
		if r.rows > 0 {
			// The first file with rows sets the range (0 is an event time).
			if p.Rows == 0 || r.minTS < p.MinTS {
				p.MinTS = r.minTS
			}
			if p.Rows == 0 || r.max > p.MaxTS {
				p.MaxTS = r.max
			}
		}
		p.Rows += r.rows
	}
	for _, id := range order {
		p := *parts[id]
		s.Partitions = append(s.Partitions, p)
		s.Files += p.Files
		s.Bytes += p.Bytes
		if p.Rows > 0 {
			if s.Rows == 0 || p.MinTS < s.MinTS {
				s.MinTS = p.MinTS
			}
			if s.Rows == 0 || p.MaxTS > s.MaxTS {
				s.MaxTS = p.MaxTS
			}
		}
		s.Rows += p.Rows
	}
	return s, nil
}

// fileStats reads a file's footer (checked, see readFooter): its rows,
// the event-time range of its ts column statistics, and the codecs of
// its column chunks (codecName).
func fileStats(ctx context.Context, a Archive, name string) (rows, minTS, maxTS int64, codecs []string, err error) {
	obj, err := a.Open(ctx, name)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("archive file %s: %w", name, err)
	}
	defer obj.Close()
	f, err := openFile(&window{Object: obj})
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("archive file %s: %w", name, err)
	}
	ts := slices.IndexFunc(Schema().Columns(), func(path []string) bool { return len(path) == 1 && path[0] == "ts" })
	first := true
	for _, rg := range f.Metadata().RowGroups {
		for _, c := range rg.Columns {
			if n := codecName(c.MetaData.Codec); !slices.Contains(codecs, n) {
				codecs = append(codecs, n)
			}
		}
		if rg.NumRows == 0 || ts < 0 || ts >= len(rg.Columns) {
			continue
		}
		st := rg.Columns[ts].MetaData.Statistics
		lo, hi := st.MinValue, st.MaxValue
		if len(lo) != 8 || len(hi) != 8 {
			continue
		}
		l, h := int64(binary.LittleEndian.Uint64(lo)), int64(binary.LittleEndian.Uint64(hi))
		if first || l < minTS {
			minTS = l
		}
		if first || h > maxTS {
			maxTS = h
		}
		first = false
	}
	return f.NumRows(), minTS, maxTS, codecs, nil
}

// codecName is a column chunk codec's name: Compression's for the codecs
// the archive writes, Parquet's (lower case) for any other.
func codecName(c format.CompressionCodec) string {
	for _, comp := range []Compression{Zstd, Snappy} {
		if comp.codec() == c {
			return comp.String()
		}
	}
	return strings.ToLower(c.String())
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	Files int   `json:"files"`
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// Problems lists every file that failed a check, naming it and the
	// problem.
	Problems []string `json:"problems,omitempty"`
	// Duplicates lists rows of the same shard, offset and signal found in
	// more than one file (up to 100 of them); DuplicateRows counts all.
	Duplicates    []Duplicate `json:"duplicates,omitempty"`
	DuplicateRows int64       `json:"duplicate_rows"`
}

// Duplicate is one (shard, offset, signal) found in two files.
type Duplicate struct {
	Pipeline string    `json:"pipeline"`
	Shard    int32     `json:"shard"`
	Offset   int64     `json:"offset"`
	Signal   string    `json:"signal"`
	Files    [2]string `json:"files"`
}

// OK reports whether nothing was found wrong.
func (v VerifyReport) OK() bool { return len(v.Problems) == 0 && v.DuplicateRows == 0 }

const maxDuplicatesListed = 100

// Verify reads every file under prefix in full and checks it: the
// whole-file checksum, the schema fingerprint (expected; "" for this
// build's), every page and row decoding, the row count against the
// footer, offsets in order and inside the range the file's name claims;
// and, across the files of each shard, rows of the same (offset, signal)
// in two files (what an independent reader would count twice). Shards
// are verified concurrency at a time. A failed check is reported, not
// returned as an error; errors are for the archive itself (listing).
func Verify(ctx context.Context, a Archive, prefix, expected string, concurrency int) (VerifyReport, error) {
	var rep VerifyReport
	if expected == "" {
		expected = SchemaFingerprint()
	}
	var shards [][]FileInfo
	for fi, err := range archiveFiles(ctx, a, prefix, "") {
		if errors.Is(err, ErrBadName) {
			rep.Files++
			rep.Problems = append(rep.Problems, err.Error())
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("verify the archive: %w", err)
		}
		rep.Files++
		rep.Bytes += fi.Size
		if n := len(shards); n == 0 || !sameShard(shards[n-1][0].Key, fi.Key) {
			shards = append(shards, nil)
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], fi)
	}
	reports := make([]VerifyReport, len(shards))
	sem := make(chan struct{}, max(concurrency, 1))
	var wg sync.WaitGroup
	for i, files := range shards {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			reports[i] = verifyShard(ctx, a, expected, files)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	for _, r := range reports {
		rep.Rows += r.Rows
		rep.Problems = append(rep.Problems, r.Problems...)
		rep.DuplicateRows += r.DuplicateRows
		for _, d := range r.Duplicates {
			if len(rep.Duplicates) < maxDuplicatesListed {
				rep.Duplicates = append(rep.Duplicates, d)
			}
		}
	}
	return rep, nil
}

// verifyShard verifies one shard's files (sorted by name, so by first
// offset). Duplicates are found with a window of the rows that a later
// file could repeat: those at or above the next file's first offset.
func verifyShard(ctx context.Context, a Archive, expected string, files []FileInfo) VerifyReport {
	var rep VerifyReport
	type key struct {
		off    int64
		signal string
	}
	window := map[key]string{}
	r := &Reader{archive: a, cfg: defaultReaderConfig()}
	r.cfg.expected = expected
	for i, fi := range files {
		next := int64(-1)
		if i+1 < len(files) {
			next = files[i+1].Key.First
		}
		var rows, prev int64 = 0, -1
		var problem error
		for e, err := range r.File(ctx, fi, 0) {
			if err != nil {
				problem = err
				break
			}
			rows++
			row := e.Row
			switch {
			case row.Offset < prev:
				problem = fmt.Errorf("archive file %s: row %d has offset %d after offset %d", fi.Name, e.Pos.Row, row.Offset, prev)
			case row.Offset < fi.Key.First || row.Offset > fi.Key.Last:
				problem = fmt.Errorf("archive file %s: row %d has offset %d outside the name's range %d-%d", fi.Name, e.Pos.Row, row.Offset, fi.Key.First, fi.Key.Last)
			}
			if problem != nil {
				break
			}
			prev = row.Offset
			k := key{row.Offset, row.Signal}
			if other, ok := window[k]; ok && other != fi.Name {
				rep.DuplicateRows++
				if len(rep.Duplicates) < maxDuplicatesListed {
					rep.Duplicates = append(rep.Duplicates, Duplicate{Pipeline: fi.Key.Pipeline, Shard: fi.Key.Shard, Offset: row.Offset, Signal: row.Signal, Files: [2]string{other, fi.Name}})
				}
				continue
			}
			if next >= 0 && row.Offset >= next {
				window[k] = fi.Name
			}
		}
		if problem == nil {
			if n, err := footerRows(ctx, a, fi.Name); err == nil && n != rows {
				problem = fmt.Errorf("archive file %s: %d rows read, the footer says %d", fi.Name, rows, n)
			}
		}
		if problem != nil {
			rep.Problems = append(rep.Problems, problem.Error())
		}
		rep.Rows += rows
		for k := range window {
			if next < 0 || k.off < next {
				delete(window, k)
			}
		}
	}
	return rep
}

func footerRows(ctx context.Context, a Archive, name string) (int64, error) {
	n, _, _, _, err := fileStats(ctx, a, name)
	return n, err
}
