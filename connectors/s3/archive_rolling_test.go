package s3_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// crashInjector fails the n-th request the archive sends, either before
// it is sent (the writer died just before it) or after the server handled
// it (the writer died before it saw the answer), and records the
// operations sent.
type crashInjector struct {
	mu    sync.Mutex
	n     int
	at    int
	after bool
	ops   []string
}

var errInjected = errors.New("injected crash")

func (c *crashInjector) arm(at int, after bool) {
	c.mu.Lock()
	c.n, c.at, c.after = 0, at, after
	c.mu.Unlock()
}

func (c *crashInjector) register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("test/crashInjector",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.n++
			hit := c.at > 0 && c.n == c.at
			c.ops = append(c.ops, middleware.GetOperationName(ctx))
			after := c.after
			c.mu.Unlock()
			if hit && !after {
				return middleware.InitializeOutput{}, middleware.Metadata{}, errInjected
			}
			out, md, err := next.HandleInitialize(ctx, in)
			if hit && err == nil {
				return middleware.InitializeOutput{}, md, errInjected
			}
			return out, md, err
		}), middleware.Before)
}

func rowsAtOffset(off int64) []parquet.Row {
	h := fnv.New64a()
	fmt.Fprint(h, off)
	x := h.Sum64()
	ts := 1_700_000_000_000_000_000 + off*1_000_000
	rows := []parquet.Row{{Sensor: fmt.Sprintf("sensor-%02d", x%13), Signal: "mean", TS: ts, Mode: int32(x % 3), Value: float64(x%1000) / 3, Offset: off}}
	if x%4 == 0 {
		rows = append(rows, parquet.Row{Sensor: rows[0].Sensor, Signal: "alarm_episode", TS: ts, Mode: 1, Value: 1, Offset: off})
	}
	return rows
}

// rollingStep is one step of the scripted shard: append up to an offset,
// or checkpoint at the current offset (stateCommits: the checkpoint's
// state save succeeds; notify: the commit notification arrives).
type rollingStep struct {
	appendTo     int64
	checkpoint   bool
	stateCommits bool
	notify       bool
	roll         bool
}

var rollingScript = []rollingStep{
	{appendTo: 300}, {checkpoint: true, stateCommits: true, notify: true},
	{appendTo: 700}, {checkpoint: true, stateCommits: true}, // notification lost
	{appendTo: 900}, {roll: true}, {checkpoint: true, stateCommits: true, notify: true},
	{appendTo: 1000}, {checkpoint: true}, // the state save fails
	{appendTo: 1300}, {checkpoint: true, stateCommits: true, notify: true},
	{appendTo: 1400}, {roll: true}, {checkpoint: true, stateCommits: true, notify: true},
}

const rollingTotal = 1400

// runRollingScript runs the script on archives made by open (each call a
// new process), crashing at the request armed in inj once, then
// restoring as the next owner would. It returns whether the crash fired.
func runRollingScript(t *testing.T, open func() *s3store.Archive, inj *crashInjector) bool {
	ctx := context.Background()
	opts := []parquet.WriterOption{parquet.WithTargetFileSize(5 << 10), parquet.WithRowGroupRows(128), parquet.WithPartSize(2 << 10)}
	epoch := streaming.Epoch(1)
	committed := parquet.RestorePoint{Cut: -1}
	fired := false
	var w *parquet.RollingWriter
	var off int64
	restart := func() {
		for {
			epoch++
			var err error
			w, err = parquet.NewRollingWriter(open(), "iot", 2, epoch, opts...)
			require.NoError(t, err)
			_, err = w.Restore(ctx, committed)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, errInjected)
			fired = true
			inj.arm(0, false)
		}
		off = committed.Cut + 1
	}
	crashed := func(err error) bool {
		if err == nil {
			return false
		}
		require.ErrorIs(t, err, errInjected)
		fired = true
		inj.arm(0, false)
		restart()
		return true
	}
	restart()
	for i := 0; i < len(rollingScript); {
		s := rollingScript[i]
		switch {
		case s.appendTo > 0:
			for off < s.appendTo {
				if crashed(w.Append(ctx, rowsAtOffset(off)...)) {
					goto again
				}
				off++
			}
		case s.roll:
			w.Roll()
		case s.checkpoint:
			cut := off - 1
			if _, err := w.PreCommit(ctx, cut); crashed(err) {
				goto again
			}
			if !s.stateCommits {
				break
			}
			committed = parquet.RestorePoint{Cut: cut, Epoch: epoch}
			if !s.notify {
				break
			}
			if _, err := w.Commit(ctx, cut); crashed(err) {
				goto again
			}
		}
		i++
		continue
	again:
		// Resume the script at the step holding the restored offset.
		for i = 0; i < len(rollingScript) && (rollingScript[i].appendTo == 0 || rollingScript[i].appendTo <= off); i++ {
		}
	}
	return fired
}

// checkArchiveExactlyOnce reads every visible file on its own and checks
// each scripted row is there exactly once, and that nothing is left in
// progress.
func checkArchiveExactlyOnce(t *testing.T, a *s3store.Archive, raw *awss3.Client, bucket, prefix string) {
	ctx := context.Background()
	objs, err := a.List(ctx, "")
	require.NoError(t, err)
	type key struct {
		off    int64
		signal string
	}
	seen := map[key]parquet.Row{}
	files := 0
	for _, o := range objs {
		if strings.HasPrefix(o.Name, parquet.StagingDir+"/") {
			continue
		}
		files++
		r, err := parquet.NewReader(a, o.Name)
		require.NoError(t, err)
		for e, err := range r.All(ctx, parquet.Position{}) {
			require.NoError(t, err)
			k := key{e.Row.Offset, e.Row.Signal}
			_, dup := seen[k]
			require.False(t, dup, "row (offset %d, signal %s) twice (file %s)", k.off, k.signal, o.Name)
			seen[k] = e.Row
		}
	}
	want := 0
	for off := range int64(rollingTotal) {
		for _, r := range rowsAtOffset(off) {
			want++
			require.Equal(t, r, seen[key{off, r.Signal}], "offset %d", off)
		}
	}
	require.Len(t, seen, want)
	require.Greater(t, files, 2, "the script rolls several files")
	ups, err := raw.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	require.NoError(t, err)
	var left []string
	for _, u := range ups.Uploads {
		left = append(left, aws.ToString(u.Key))
	}
	require.Empty(t, left, "uploads left in progress")
}

// TestRollingArchiveCrashAtEveryRequest: a shard's archive on S3 is
// driven through appends, rolls and checkpoints (with a lost commit
// notification and a failed state save); for every request of that run,
// the writer dies once just before the request, and once just after it
// (the server handled it, the writer never saw the answer). The next
// owner restores from the last committed checkpoint and the source
// replays from its cut. Every row ends up in exactly one visible file, no
// upload is left in progress.
// requireRows reads every row under prefix of a, in order: they must be
// want.
func requireRows(t *testing.T, a parquet.Archive, prefix string, want []parquet.Row) {
	t.Helper()
	r, err := parquet.NewReader(a, prefix)
	require.NoError(t, err)
	i := 0
	for e, err := range r.All(context.Background(), parquet.Position{}) {
		require.NoError(t, err)
		require.Less(t, i, len(want), "more rows than written")
		require.Equal(t, want[i], e.Row)
		i++
	}
	require.Equal(t, len(want), i)
}

func TestRollingArchiveCrashAtEveryRequest(t *testing.T) {
	// Small parts: files of several parts. S3's minimum: every file is
	// one part uploaded when it is sealed, the open file lives in the
	// pre-commit records until then.
	for _, minPart := range []int64{1 << 10, 5 << 20} {
		t.Run(fmt.Sprintf("minpart=%d", minPart), func(t *testing.T) { crashAtEveryRequest(t, minPart) })
	}
}

func crashAtEveryRequest(t *testing.T, minPart int64) {
	f := newFakeS3(t)
	prefix := 0
	setup := func() (func() *s3store.Archive, *crashInjector, string) {
		prefix++
		p := fmt.Sprintf("roll%03d", prefix)
		inj := &crashInjector{}
		open := func() *s3store.Archive {
			a, err := s3store.NewArchive(context.Background(), testBucket,
				f.opts(s3store.WithPrefix(p), s3store.WithMinPartSize(minPart), s3store.WithAPIOptions(inj.register))...)
			require.NoError(t, err)
			return a
		}
		return open, inj, p
	}
	open, inj, p := setup()
	require.False(t, runRollingScript(t, open, inj))
	clean := append([]string(nil), inj.ops...)
	checkArchiveExactlyOnce(t, open(), f.Raw, testBucket, p+"/")
	counts := map[string]int{}
	for _, op := range clean {
		counts[op]++
	}
	t.Logf("%d requests without a crash: %v", len(clean), counts)
	for _, op := range []string{"CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "CopyObject", "PutObject", "DeleteObjects"} {
		require.Positive(t, counts[op], "the script never sends %s", op)
	}
	for i := range clean {
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("%03d-%s-before", i+1, clean[i])
			if after {
				name = fmt.Sprintf("%03d-%s-after", i+1, clean[i])
			}
			t.Run(name, func(t *testing.T) {
				open, inj, p := setup()
				inj.arm(i+1, after)
				require.True(t, runRollingScript(t, open, inj), "the crash did not fire")
				checkArchiveExactlyOnce(t, open(), f.Raw, testBucket, p+"/")
			})
		}
	}
}

// The same script on a real S3 server (versitygw: SigV4, multipart
// uploads with S3's 5 MiB minimum part, server-side copy), without and
// with crashes at a sample of requests of each kind; and a file of
// several 5 MiB parts.
func TestRollingArchiveVersitygw(t *testing.T) {
	v := startVersitygw(t, "archive")
	raw := awss3.New(awss3.Options{Region: "us-east-1", BaseEndpoint: aws.String(v.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(v.AccessKey, v.SecretKey, "")})
	n := 0
	setup := func() (func() *s3store.Archive, *crashInjector, string) {
		n++
		p := fmt.Sprintf("roll%03d", n)
		inj := &crashInjector{}
		open := func() *s3store.Archive {
			a, err := s3store.NewArchive(context.Background(), "archive",
				v.opts(s3store.WithPrefix(p), s3store.WithAPIOptions(inj.register))...)
			require.NoError(t, err)
			return a
		}
		return open, inj, p
	}
	open, inj, p := setup()
	start := time.Now()
	require.False(t, runRollingScript(t, open, inj))
	clean := append([]string(nil), inj.ops...)
	checkArchiveExactlyOnce(t, open(), raw, "archive", p+"/")
	t.Logf("%d requests in %v", len(clean), time.Since(start))
	t.Run("ManyParts", func(t *testing.T) {
		ctx := context.Background()
		open, inj, _ := setup()
		w, err := parquet.NewRollingWriter(open(), "iot", 9, 1, parquet.WithPartSize(5<<20))
		require.NoError(t, err)
		_, err = w.Restore(ctx, parquet.RestorePoint{Cut: -1})
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(1, 2))
		var want []parquet.Row
		const n = 2_000_000 // about 16 MB: ts and offset are delta-encoded, value is random
		batch := make([]parquet.Row, 0, 1000)
		for off := range int64(n) {
			batch = append(batch, parquet.Row{Sensor: "s", Signal: "mean", TS: off, Value: rng.Float64(), Offset: off})
			if len(batch) == cap(batch) {
				require.NoError(t, w.Append(ctx, batch...))
				want = append(want, batch...)
				batch = batch[:0]
			}
			if off == n/2-1 {
				_, err := w.PreCommit(ctx, off)
				require.NoError(t, err)
				_, err = w.Commit(ctx, off)
				require.NoError(t, err)
			}
		}
		w.Roll()
		_, err = w.PreCommit(ctx, n-1)
		require.NoError(t, err)
		st, err := w.Commit(ctx, n-1)
		require.NoError(t, err)
		require.Len(t, st.Files, 1)
		parts := 0
		for _, op := range inj.ops {
			if op == "UploadPart" {
				parts++
			}
		}
		require.GreaterOrEqual(t, parts, 3, "%d bytes in %d parts", st.FileBytes, parts)
		requireRows(t, open(), "iot/", want)
	})
	sampled := map[string]int{}
	for i, op := range clean {
		if sampled[op] >= 2 {
			continue
		}
		sampled[op]++
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("%03d-%s-after=%v", i+1, op, after), func(t *testing.T) {
				open, inj, p := setup()
				inj.arm(i+1, after)
				require.True(t, runRollingScript(t, open, inj))
				checkArchiveExactlyOnce(t, open(), raw, "archive", p+"/")
			})
		}
	}
}

// TestRollingArchiveCheckpointWritesOnlyNewBytes: on S3 (no part under
// 5 MiB but the last) the open file's bytes stay unuploaded across many
// checkpoints. Each checkpoint writes only the bytes added since the one
// before, as a tail segment: its pre-commit record stays small instead
// of carrying all of them again, and the archive's bytes over 60
// checkpoints are about the file's, not 30 times them. With 64 KiB parts
// the segments of the bytes uploaded since are deleted as the commits go
// on. A new owner restoring the last checkpoint finishes the file with
// every row.
func TestRollingArchiveCheckpointWritesOnlyNewBytes(t *testing.T) {
	t.Run("5MiB-parts", func(t *testing.T) { checkpointWritesOnlyNewBytes(t, 0, 60) })
	t.Run("64KiB-parts", func(t *testing.T) { checkpointWritesOnlyNewBytes(t, 64<<10, 16) })
}

func checkpointWritesOnlyNewBytes(t *testing.T, minPart int64, maxTails int) {
	ctx := context.Background()
	f := newFakeS3(t)
	open := func() *s3store.Archive {
		opts := []s3store.Option{s3store.WithPrefix("tail")}
		if minPart > 0 {
			opts = append(opts, s3store.WithMinPartSize(minPart))
		}
		a, err := s3store.NewArchive(ctx, testBucket, f.opts(opts...)...)
		require.NoError(t, err)
		return a
	}
	w, err := parquet.NewRollingWriter(open(), "iot", 4, 1, parquet.WithRowGroupRows(512))
	require.NoError(t, err)
	_, err = w.Restore(ctx, parquet.RestorePoint{Cut: -1})
	require.NoError(t, err)

	const checkpoints, perCheckpoint = 60, 1000
	var written, rows int64
	var off int64
	for range checkpoints {
		for range perCheckpoint {
			r := rowsAtOffset(off)
			require.NoError(t, w.Append(ctx, r...))
			rows += int64(len(r))
			off++
		}
		st, err := w.PreCommit(ctx, off-1)
		require.NoError(t, err)
		written += st.Bytes
		_, err = w.Commit(ctx, off-1)
		require.NoError(t, err)
	}
	out, err := f.Raw.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(testBucket), Prefix: aws.String("tail/" + parquet.StagingDir + "/")})
	require.NoError(t, err)
	var records, tails int
	var largest int64
	for _, o := range out.Contents {
		name := aws.ToString(o.Key)
		switch {
		case strings.Contains(name, "/rec-"):
			records++
			largest = max(largest, aws.ToInt64(o.Size))
		case strings.Contains(name, ".tb-"):
			tails++
		}
	}
	require.Positive(t, records)
	require.Positive(t, tails, "the open file's bytes are in tail segments")
	require.LessOrEqual(t, tails, maxTails, "tail segments of uploaded bytes are deleted")
	require.LessOrEqual(t, records, 6, "old records are deleted")
	require.Less(t, largest, int64(16<<10), "a pre-commit record carries no tail bytes")

	// A new owner restores the last checkpoint: one file, every row.
	w2, err := parquet.NewRollingWriter(open(), "iot", 4, 2)
	require.NoError(t, err)
	rst, err := w2.Restore(ctx, parquet.RestorePoint{Cut: off - 1, Epoch: 1})
	require.NoError(t, err)
	require.Len(t, rst.Files, 1)
	require.Equal(t, rows, rst.Rows)
	t.Logf("%d checkpoints wrote %d bytes for a file of %d; %d tail segments, largest record %d bytes", checkpoints, written, rst.Bytes, tails, largest)
	require.Less(t, written, 2*rst.Bytes+checkpoints*(16<<10), "checkpoints rewrote the file's bytes")
	got := archivetest.ReadIndependently(t, open(), "")
	require.Len(t, got, int(rows))
	require.Empty(t, archivetest.Duplicates(got))
	left, err := f.Raw.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(testBucket), Prefix: aws.String("tail/" + parquet.StagingDir + "/")})
	require.NoError(t, err)
	require.Empty(t, left.Contents, "the restore leaves no segment or record behind")
}

// versitygwBehind returns the URL of a front to v: requests pass through
// front, which hands the ones it does not answer itself to v.
func versitygwBehind(t *testing.T, v *versitygw, front func(v http.Handler) http.Handler) string {
	t.Helper()
	target, err := url.Parse(v.URL)
	require.NoError(t, err)
	srv := httptest.NewServer(front(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// copyLimit refuses a CopyObject of a source larger than limit as S3
// does one over 5 GiB (versitygw copies any size); UploadPartCopy passes.
func copyLimit(raw *awss3.Client, limit int64) func(v http.Handler) http.Handler {
	return func(v http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if src := r.Header.Get("X-Amz-Copy-Source"); r.Method == http.MethodPut && src != "" && !r.URL.Query().Has("partNumber") {
				src, err := url.PathUnescape(strings.TrimPrefix(src, "/"))
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				bucket, key, _ := strings.Cut(src, "/")
				head, err := raw.HeadObject(r.Context(), &awss3.HeadObjectInput{Bucket: &bucket, Key: &key})
				if err == nil && aws.ToInt64(head.ContentLength) > limit {
					w.WriteHeader(http.StatusBadRequest)
					fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRequest</Code><Message>The specified copy source is larger than the maximum allowable size for a copy source: %d</Message></Error>`, limit)
					return
				}
			}
			v.ServeHTTP(w, r)
		})
	}
}

// TestRollingArchiveFileOverTheCopyLimitVersitygw: a file closes once it
// reached the target size, so a file of the largest target passes it by
// a row group and its footer, and is over S3's CopyObject limit (here
// lowered to the target, on a versitygw that refuses larger copies as S3
// does). Commit publishes it with a multipart copy instead of failing at
// every try, and every row reads back.
func TestRollingArchiveFileOverTheCopyLimitVersitygw(t *testing.T) {
	const target = 6 << 20
	s3store.SetCopyLimits(t, target, 5<<20)
	v := startVersitygw(t, "archive")
	raw := awss3.New(awss3.Options{Region: "us-east-1", BaseEndpoint: aws.String(v.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(v.AccessKey, v.SecretKey, "")})
	front := versitygwBehind(t, v, copyLimit(raw, target))
	var rc s3store.RequestCounter
	ctx := context.Background()
	a, err := s3store.NewArchive(ctx, "archive", s3store.WithEndpoint(front), s3store.WithPathStyle(true), s3store.WithRegion("us-east-1"),
		s3store.WithStaticCredentials(v.AccessKey, v.SecretKey, ""), s3store.WithPrefix("big"), s3store.WithAPIOptions(rc.Register))
	require.NoError(t, err)
	w, err := parquet.NewRollingWriter(a, "iot", 1, 1, parquet.WithTargetFileSize(target), parquet.WithPartSize(5<<20))
	require.NoError(t, err)
	_, err = w.Restore(ctx, parquet.RestorePoint{Cut: -1})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	var want []parquet.Row
	batch := make([]parquet.Row, 0, 1000)
	var off int64
	for ; off < 2_000_000; off++ {
		batch = append(batch, parquet.Row{Sensor: "s", Signal: "mean", TS: off, Value: rng.Float64(), Offset: off})
		if len(batch) == cap(batch) {
			require.NoError(t, w.Append(ctx, batch...))
			want = append(want, batch...)
			batch = batch[:0]
		}
	}
	w.Roll()
	_, err = w.PreCommit(ctx, off-1)
	require.NoError(t, err)
	st, err := w.Commit(ctx, off-1)
	require.NoError(t, err)
	objs, err := a.List(ctx, "iot/")
	require.NoError(t, err)
	var largest int64
	for _, o := range objs {
		largest = max(largest, o.Size)
	}
	require.Greater(t, largest, int64(target), "a file passes its target")
	require.GreaterOrEqual(t, rc.Count("UploadPartCopy"), int64(2), "%d files, %d bytes", len(st.Files), st.FileBytes)
	requireRows(t, a, "iot/", want)
	ups, err := raw.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String("archive")})
	require.NoError(t, err)
	require.Empty(t, ups.Uploads, "uploads left in progress")
}

// TestCompactRetriedCompleteVersitygw: the reply to compaction's
// CompleteMultipartUpload is lost (the server completed the upload, the
// front answers 500), so the SDK sends it again and gets NoSuchUpload, as
// S3 may answer for an upload completed already (versitygw answers 200
// again, so the front answers the retry). Compaction publishes the
// finished output instead of giving up with it left in its hidden
// staging folder.
func TestCompactRetriedCompleteVersitygw(t *testing.T) {
	v := startVersitygw(t, "archive")
	var completes atomic.Int32
	var lostReply atomic.Bool
	front := versitygwBehind(t, v, func(v http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") && strings.Contains(r.URL.Path, "/"+parquet.StagingDir+"/compact/") {
				switch completes.Add(1) {
				case 1:
					rec := httptest.NewRecorder()
					v.ServeHTTP(rec, r)
					lostReply.Store(rec.Code == http.StatusOK)
					w.WriteHeader(http.StatusInternalServerError)
					fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>`)
					return
				case 2:
					w.WriteHeader(http.StatusNotFound)
					fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.</Message></Error>`)
					return
				}
			}
			v.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	a, err := s3store.NewArchive(ctx, "archive", s3store.WithEndpoint(front), s3store.WithPathStyle(true), s3store.WithRegion("us-east-1"),
		s3store.WithStaticCredentials(v.AccessKey, v.SecretKey, ""), s3store.WithPrefix("cmp"))
	require.NoError(t, err)
	var want []parquet.Row
	w, err := parquet.NewWriter(a, "iot", 0, 1)
	require.NoError(t, err)
	for off := range int64(100) {
		rows := rowsAtOffset(off)
		want = append(want, rows...)
		require.NoError(t, w.Append(ctx, rows...))
		if off%10 == 9 {
			_, _, err := w.Flush(ctx)
			require.NoError(t, err)
		}
	}
	before, err := a.List(ctx, "iot/")
	require.NoError(t, err)
	require.Len(t, before, 10)

	p := parquet.DefaultCompactPolicy()
	p.TargetSize, p.SmallFile = 1<<20, 1<<20
	res, err := parquet.Compact(ctx, a, "iot/", "", p, time.Now().Add(2*time.Hour))
	require.NoError(t, err)
	require.True(t, lostReply.Load(), "the first CompleteMultipartUpload completed the upload")
	require.EqualValues(t, 2, completes.Load(), "the SDK sent CompleteMultipartUpload again")
	require.Len(t, res.Runs, 1)
	after, err := a.List(ctx, "")
	require.NoError(t, err)
	var names []string
	for _, o := range after {
		names = append(names, o.Name)
	}
	require.Equal(t, []string{res.Runs[0].Output}, names, "the output alone, nothing left in staging")
	got := archivetest.ReadIndependently(t, a, "")
	require.Len(t, got, len(want))
	require.Empty(t, archivetest.Duplicates(got))
}

// Regression: a crash in the middle of a multipart copy (Move of a file
// over 5 GiB) left its upload open under the file's published name for
// ever: Restore aborted only the uploads of the shard's staging folder.
// It aborts those under the shard's published names too, and leaves
// another shard's alone.
func TestRollingRestoreAbortsACrashedCopysUpload(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, newFakeS3(t), s3store.WithPrefix("archive"))
	crashed := parquet.FileKey{Pipeline: "iot", Shard: 1, Epoch: 1, First: 0, Last: 99}.Name()
	other := parquet.FileKey{Pipeline: "iot", Shard: 2, Epoch: 1, First: 0, Last: 99}.Name()
	for _, name := range []string{crashed, other} {
		_, err := a.CreateUpload(ctx, name) // what copyInParts' first request leaves
		require.NoError(t, err)
	}
	w, err := parquet.NewRollingWriter(a, "iot", 1, 2)
	require.NoError(t, err)
	st, err := w.Restore(ctx, parquet.RestorePoint{Cut: -1})
	require.NoError(t, err)
	require.Equal(t, 1, st.Discarded)
	ups, err := a.ListUploads(ctx, "iot/")
	require.NoError(t, err)
	require.Len(t, ups, 1)
	require.Equal(t, other, ups[0].Name)
}
