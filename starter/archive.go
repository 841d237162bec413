package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/archiveloc"
)

// archiveFlags are the flags every archive command shares: where the
// archive is and how to reach S3.
type archiveFlags struct {
	location string
	prefix   string
	s3       archiveloc.S3
	// envErr is the TFLO_S3_* variables' error (a bad response timeout),
	// reported when a command opens the archive unless
	// --s3-response-timeout was given (timeoutGiven), which wins.
	envErr       error
	timeoutGiven func() bool
}

func (f *archiveFlags) register(cmd *cobra.Command) {
	env, err := archiveloc.S3FromEnv(os.LookupEnv)
	f.envErr = err
	fl := cmd.PersistentFlags()
	fl.StringVar(&f.location, "archive", "", "archive location: "+archiveloc.Examples+" (required)")
	fl.StringVar(&f.prefix, "prefix", "", `only names under this prefix, e.g. "iot/" or "iot/shard-000003/"`)
	fl.StringVar(&f.s3.Endpoint, "s3-endpoint", env.Endpoint, "S3-compatible endpoint URL, path-style (env "+archiveloc.EnvEndpoint+"; default AWS)")
	fl.StringVar(&f.s3.Region, "s3-region", env.Region, "S3 region (env "+archiveloc.EnvRegion+"; default AWS_REGION, else us-east-1)")
	fl.StringVar(&f.s3.AccessKeyEnv, "s3-access-key-env", env.AccessKeyEnv, "variable holding the S3 access key (env "+archiveloc.EnvAccessKeyEnv+"; default the AWS standard chain)")
	fl.StringVar(&f.s3.SecretKeyEnv, "s3-secret-key-env", env.SecretKeyEnv, "variable holding the S3 secret key (env "+archiveloc.EnvSecretKeyEnv+")")
	fl.StringVar(&f.s3.CAFile, "s3-ca-file", env.CAFile, "PEM file of a private CA the S3 endpoint's certificate is signed by (env "+archiveloc.EnvCAFile+"; default the system roots)")
	fl.DurationVar(&f.s3.ResponseTimeout, "s3-response-timeout", env.ResponseTimeout, "how long an S3 request waits for the server's answer once sent (env "+archiveloc.EnvResponseTimeout+"; 0: "+s3.DefaultResponseTimeout.String()+")")
	f.timeoutGiven = func() bool { return fl.Changed("s3-response-timeout") }
}

// open checks the flags and opens the archive.
func (f *archiveFlags) open(ctx context.Context) (parquet.Archive, archiveloc.Location, error) {
	if f.location == "" {
		return nil, archiveloc.Location{}, usagef("--archive is required (%s)", archiveloc.Examples)
	}
	loc, err := archiveloc.Parse(f.location)
	if err != nil {
		return nil, loc, usageError{err}
	}
	if f.envErr != nil && !f.timeoutGiven() {
		return nil, loc, usageError{f.envErr}
	}
	if err := f.s3.Validate(); err != nil {
		return nil, loc, usageError{err}
	}
	a, err := archiveloc.OpenExisting(ctx, loc, f.s3)
	if errors.Is(err, archiveloc.ErrNotFound) {
		return nil, loc, notFoundError{err}
	}
	return a, loc, err
}

func (a *app) archiveCommand() *cobra.Command {
	var af archiveFlags
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Inspect, verify and compact a Parquet archive (a folder or an S3 prefix)",
		Long: `The archive is where the central workers write their derived signals
(Parquet files named <pipeline>/shard-<n>/<first>-<last>-e<epoch>.parquet)
and what backfills replay. These commands work on file:// folders and
s3://bucket/prefix alike; for S3-compatible servers give --s3-endpoint
and the names of the variables holding the keys. A file:// folder that
does not exist is an error (exit 3), never created; an S3 prefix with no
objects is an empty archive.`,
	}
	af.register(cmd)
	cmd.AddCommand(a.archiveLs(&af), a.archiveVerify(&af), a.archiveCompact(&af))
	return cmd
}

func (a *app) archiveLs(af *archiveFlags) *cobra.Command {
	var concurrency int
	cmd := &cobra.Command{
		Use:     "ls",
		Short:   "List partitions with their files, rows, bytes, offsets, time range and codecs",
		Example: "  starter archive ls --archive file:///var/tflo/archive\n  starter archive ls --archive s3://tflo-archive/prod --s3-endpoint http://minio:9000 --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkConcurrency(concurrency); err != nil {
				return err
			}
			arc, loc, err := af.open(cmd.Context())
			if err != nil {
				return err
			}
			s, err := parquet.Summarize(cmd.Context(), arc, af.prefix, concurrency)
			if err != nil {
				return err
			}
			return a.emit(s, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintln(tw, "PIPELINE\tSHARD\tFILES\tROWS\tBYTES\tOFFSETS\tFROM\tTO\tCODEC\tSTAGED\t")
				for _, p := range s.Partitions {
					offsets := "-" // no file published yet: the first is open (staged)
					if p.Files > 0 {
						offsets = fmt.Sprintf("%d-%d", p.FirstOffset, p.LastOffset)
					}
					codec := "-"
					if len(p.Codecs) > 0 {
						codec = strings.Join(p.Codecs, "+")
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", p.Pipeline, p.Shard, p.Files, p.Rows, bytesString(p.Bytes),
						offsets, tsString(p.MinTS), tsString(p.MaxTS), codec, p.Staged)
				}
				tw.Flush()
				printf(w, "%s: %s, %s, %s, %s, %s .. %s\n", loc, counted(len(s.Partitions), "partition"), counted(s.Files, "file"), counted(s.Rows, "row"),
					bytesString(s.Bytes), tsString(s.MinTS), tsString(s.MaxTS))
				for _, p := range s.Problems {
					printf(w, "unreadable: %s\n", p)
				}
			})
		},
	}
	cmd.Flags().IntVar(&concurrency, "concurrency", 16, "footers read at once")
	return cmd
}

// checkConcurrency refuses a --concurrency below 1, which the archive
// reads would otherwise run as 1 without a word.
func checkConcurrency(n int) error {
	if n < 1 {
		return usagef("--concurrency %d must be at least 1", n)
	}
	return nil
}

func (a *app) archiveVerify(af *archiveFlags) *cobra.Command {
	var concurrency int
	var fingerprint string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Read every file: checksums, schema fingerprint, rows, and rows found in two files",
		Long: `verify reads every file of the archive in full and checks its whole-file
checksum, its schema fingerprint, every page and row, the offsets against
the range the name claims, and across each shard's files the rows of one
(offset, signal) held twice (which Spark, DuckDB or Arrow would count
twice). It exits 1 when it finds anything.`,
		Example: "  starter archive verify --archive file:///var/tflo/archive --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkConcurrency(concurrency); err != nil {
				return err
			}
			arc, loc, err := af.open(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := parquet.Verify(cmd.Context(), arc, af.prefix, fingerprint, concurrency)
			if err != nil {
				return err
			}
			if err := a.emit(rep, func(w io.Writer) {
				printf(w, "%s: %s, %s, %s\n", loc, counted(rep.Files, "file"), counted(rep.Rows, "row"), bytesString(rep.Bytes))
				for _, p := range rep.Problems {
					printf(w, "problem: %s\n", p)
				}
				for _, d := range rep.Duplicates {
					printf(w, "duplicate: %s shard %d offset %d signal %s in %s and %s\n", d.Pipeline, d.Shard, d.Offset, d.Signal, d.Files[0], d.Files[1])
				}
				if rep.OK() {
					printf(w, "ok\n")
				} else {
					printf(w, "%d problems, %d duplicate rows\n", len(rep.Problems), rep.DuplicateRows)
				}
			}); err != nil {
				return err
			}
			if !rep.OK() {
				return fmt.Errorf("archive %s: %d problems, %d duplicate rows", loc, len(rep.Problems), rep.DuplicateRows)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&concurrency, "concurrency", 4, "shards verified at once")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "expected schema fingerprint (default: this build's, "+parquet.SchemaFingerprint()+")")
	return cmd
}

func (a *app) archiveCompact(af *archiveFlags) *cobra.Command {
	p := parquet.DefaultCompactPolicy()
	target, small := "128MiB", "32MiB"
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Rewrite runs of small old files into large files",
		Long: `compact rewrites, shard by shard, runs of consecutive small files written
at least --min-age ago into files of about --target-size, publishes each
with one atomic move, then deletes its inputs; it also deletes files
another file fully covers (left by crashes of older writers or of an
earlier compaction), and in a local archive the temp files crashed writers
left, over an hour old (for up to ` + parquet.TempSweepBudget.String() + `; it says when it stopped there, the
rest waits for the next compaction). Readers running meanwhile read each
row once. Run one compaction at a time per archive.`,
		Example: "  starter archive compact --archive file:///var/tflo/archive --dry-run\n  starter archive compact --archive s3://tflo-archive/prod --min-age 24h",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if p.TargetSize, err = parseSize("--target-size", target); err != nil {
				return err
			}
			if p.SmallFile, err = parseSize("--small-file", small); err != nil {
				return err
			}
			// The flags by name first, as typed: p.Validate names the
			// policy's fields ("compaction small-file size 2097152").
			switch {
			case p.TargetSize < 1:
				return usagef("--target-size %q must be at least 1 byte", target)
			case p.TargetSize > parquet.MaxTargetFileSize:
				return usagef("--target-size %q is larger than %s, the largest file size", target, bytesString(parquet.MaxTargetFileSize))
			case p.SmallFile < 1:
				return usagef("--small-file %q must be at least 1 byte", small)
			case p.SmallFile > p.TargetSize:
				return usagef("--small-file %q is larger than --target-size %q", small, target)
			case p.MinAge < 0:
				return usagef("--min-age %s must not be negative", p.MinAge)
			}
			if err := p.Validate(); err != nil {
				return usageError{err}
			}
			arc, loc, err := af.open(cmd.Context())
			if err != nil {
				return err
			}
			res, err := parquet.Compact(cmd.Context(), arc, af.prefix, "", p, time.Now())
			if err != nil {
				return err
			}
			return a.emit(res, func(w io.Writer) {
				verb, deleted := "rewrote", "deleted"
				if res.DryRun {
					verb, deleted = "would rewrite", "would delete" // nothing was deleted
				}
				var in, out int64
				files := 0
				for _, r := range res.Runs {
					printf(w, "%s %s (%s) as %s\n", verb, counted(len(r.Inputs), "file"), bytesString(r.BytesIn), r.Output)
					in, out, files = in+r.BytesIn, out+r.BytesOut, files+len(r.Inputs)
				}
				for _, f := range res.Redundant {
					printf(w, "covered by another file, %s: %s\n", deleted, f)
				}
				covered := counted(len(res.Redundant), "covered file") + " deleted"
				if res.DryRun {
					covered = "would delete " + counted(len(res.Redundant), "covered file")
				}
				printf(w, "%s: %s, %s listed; %s %s into %d (%s in, %s out); %s\n",
					loc, counted(res.Shards, "shard"), counted(res.Files, "file"), verb, counted(files, "file"), len(res.Runs),
					bytesString(in), bytesString(out), covered)
				printStaleTempFiles(w, loc, res)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target-size", target, "size of the files compaction writes (K, M, G, KiB, MiB, GiB suffixes)")
	f.StringVar(&small, "small-file", small, "only files smaller than this are rewritten")
	f.DurationVar(&p.MinAge, "min-age", p.MinAge, "only files written at least this long ago (0: all)")
	f.BoolVar(&p.DryRun, "dry-run", false, "show what would be rewritten, change nothing")
	return cmd
}

// printStaleTempFiles prints what a compaction's sweep of stale temp
// files deleted, and that it stopped at its time budget if it did.
func printStaleTempFiles(w io.Writer, loc archiveloc.Location, res parquet.CompactResult) {
	switch {
	case res.StaleTempSweepStopped:
		printf(w, "%s: the sweep of stale temp files stopped at its %s cap, having deleted %s; the rest waits for the next compaction\n",
			loc, parquet.TempSweepBudget, counted(res.StaleTempFiles, "stale temp file"))
	case res.StaleTempFiles > 0:
		printf(w, "%s: deleted %s crashed writers left\n", loc, counted(res.StaleTempFiles, "stale temp file"))
	}
}

// parseSize parses "134217728", "128MiB", "128M" (binary units).
func parseSize(flag, v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, usagef("%s %q: want a size like 128MiB", flag, v)
	}
	if n > math.MaxInt64/mult {
		// n*mult would wrap around, to a size that may pass the checks.
		return 0, usagef("%s %q: too large", flag, v)
	}
	return n * mult, nil
}

// counted is n and noun, plural unless n is 1: "1 file", "2 files".
func counted[N int | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// bytesString prints a size with a binary unit.
func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// tsString prints an event time (unix nanoseconds) in UTC, "-" for none.
func tsString(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}
