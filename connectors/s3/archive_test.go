package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
	s3store "github.com/tflo-io/tflo/connectors/s3"
)

func newArchive(t *testing.T, f *fakeS3, extra ...s3store.Option) (*s3store.Archive, *s3store.RequestCounter) {
	t.Helper()
	var rc s3store.RequestCounter
	a, err := s3store.NewArchive(context.Background(), testBucket, f.opts(append([]s3store.Option{s3store.WithAPIOptions(rc.Register)}, extra...)...)...)
	require.NoError(t, err)
	return a, &rc
}

func TestArchiveConformance(t *testing.T) {
	archivetest.Run(t, func(t *testing.T) parquet.Archive {
		a, _ := newArchive(t, newFakeS3(t), s3store.WithPrefix("archive"))
		return a
	})
}

// The Parquet writer and the backfill reader work unchanged over S3: each
// file is one PUT, and the reader streams back the rows that were written.
func TestArchiveParquetWriteRead(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	a, rc := newArchive(t, f, s3store.WithPrefix("archive"))
	w, err := parquet.NewWriter(a, "iot", 3, 7, parquet.WithRowGroupRows(100))
	require.NoError(t, err)
	var rows []parquet.Row
	for i := range 1000 {
		rows = append(rows, parquet.Row{Sensor: "s-1", Signal: "sma", TS: int64(1_700_000_000_000_000_000 + i), Mode: 1, Value: float64(i) / 4, Offset: int64(i)})
	}
	for _, chunk := range [][]parquet.Row{rows[:400], rows[400:]} {
		rc.Reset()
		key, err := w.WriteFile(ctx, chunk)
		require.NoError(t, err)
		require.Equal(t, int64(1), rc.Count("PutObject"), "one PUT per file: %v", rc.Counts())
		require.Contains(t, f.objectNames(t, "archive/"), "archive/"+key.Name())
	}

	rc.Reset()
	r, err := parquet.NewReader(a, parquet.ShardPrefix("iot", 3), parquet.WithExpectedFingerprint(parquet.SchemaFingerprint()))
	require.NoError(t, err)
	var got []parquet.Row
	for e, err := range r.All(ctx, parquet.Position{}) {
		require.NoError(t, err)
		got = append(got, e.Row)
	}
	require.Equal(t, rows, got)
	t.Logf("backfill of 2 files, 1000 rows: %v", rc.Counts())
	require.LessOrEqual(t, rc.Count("GetObject"), rc.Count("HeadObject"), "a small file is one GET per open, whatever the reader's read pattern: %v", rc.Counts())
}

func TestArchiveBlockCacheReads(t *testing.T) {
	ctx := context.Background()
	a, rc := newArchive(t, newFakeS3(t), s3store.WithReadBlockSize(4096))
	data := make([]byte, 5*4096+123)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	require.NoError(t, a.PutAtomic(ctx, "obj", data))
	o, err := a.Open(ctx, "obj")
	require.NoError(t, err)
	defer o.Close()
	cases := []struct {
		name    string
		off, n  int
		wantEOF bool
	}{
		{"inside a block", 10, 100, false},
		{"across a block edge", 4000, 200, false},
		{"exactly one block", 4096, 4096, false},
		{"large, several blocks", 100, 3*4096 + 7, false},
		{"tail", len(data) - 50, 50, false},
		{"over the end", len(data) - 50, 80, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := make([]byte, tc.n)
			n, err := o.ReadAt(p, int64(tc.off))
			want := data[tc.off:min(tc.off+tc.n, len(data))]
			require.Equal(t, len(want), n)
			require.Equal(t, want, p[:n])
			if tc.wantEOF {
				require.ErrorIs(t, err, io.EOF)
			} else {
				require.NoError(t, err)
			}
		})
	}
	rc.Reset()
	p := make([]byte, 16)
	for i := 0; i < 200; i++ {
		_, err := o.ReadAt(p, int64(8192+i*16))
		require.NoError(t, err)
		require.Equal(t, data[8192+i*16:8192+i*16+16], p)
	}
	require.LessOrEqual(t, rc.Count("GetObject"), int64(1), "200 small reads inside one block: %v", rc.Counts())
}

func TestArchiveObjectReplacedWhileOpen(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, newFakeS3(t))
	require.NoError(t, a.PutAtomic(ctx, "p/f", []byte("version one")))
	o, err := a.Open(ctx, "p/f")
	require.NoError(t, err)
	defer o.Close()
	require.NoError(t, a.PutAtomic(ctx, "p/f", []byte("version two")))
	_, err = o.ReadAt(make([]byte, 4), 0)
	require.ErrorContains(t, err, "replaced since it was opened")

	require.NoError(t, o.Close())
	_, err = o.ReadAt(make([]byte, 4), 0)
	require.ErrorContains(t, err, "closed")
}

// TestListUploadsNoSuchUploadOnALaterPage: a listing of uploads in pages
// (here one upload a page) whose later page the server answers with
// NoSuchUpload (its marker upload completed or aborted meanwhile, on
// servers that answer so) is an error naming the prefix, not the end of
// the listing: a restore would leave the uploads past the marker behind.
// On the first page it still means no upload (gofakes3's answer for a
// bucket that never had one).
func TestListUploadsNoSuchUploadOnALaterPage(t *testing.T) {
	ctx := context.Background()
	var laterPages atomic.Int32
	f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			if r.Method == http.MethodGet && q.Has("uploads") {
				if q.Has("upload-id-marker") || q.Has("key-marker") {
					laterPages.Add(1)
					w.WriteHeader(http.StatusNotFound)
					fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>`)
					return
				}
				q.Set("max-uploads", "1")
				r.URL.RawQuery = q.Encode()
			}
			fake.ServeHTTP(w, r)
		})
	})
	a, _ := newArchive(t, f, s3store.WithPrefix("ups"))
	none, err := a.ListUploads(ctx, "_tflo/")
	require.NoError(t, err, "no upload in the bucket yet")
	require.Empty(t, none)
	for range 3 {
		_, err := a.CreateUpload(ctx, "_tflo/staging/iot/shard-000001/x.inprogress")
		require.NoError(t, err)
	}
	ups, err := a.ListUploads(ctx, "_tflo/")
	require.Error(t, err, "listed %d of 3 uploads as all of them", len(ups))
	require.ErrorContains(t, err, "s3://"+testBucket+"/ups/_tflo/")
	require.Positive(t, laterPages.Load())
}

// TestArchiveMoveReportsAFailedAbortOfItsCopy: a multipart copy (Move of
// a file over the CopyObject limit) whose part copy failed aborted its
// upload and dropped the abort's error, so an abort that failed too left
// the upload open without a word. The error names the upload and its
// key, and the copy's own failure. When the part copy failed because the
// source is gone, Move took its "source gone" branch and dropped the
// abort's error again: it is in the error when neither object exists, and
// logged when the target does (the move done already, Move's nil stands).
func TestArchiveMoveReportsAFailedAbortOfItsCopy(t *testing.T) {
	const (
		from = "s3://" + testBucket + "/mv/iot/from.parquet"
		to   = "s3://" + testBucket + "/mv/iot/to.parquet"
	)
	for _, c := range []struct {
		name       string
		partCopy   string // the part copy's error code (NoSuchKey: the source went after Move's HEAD)
		status     int
		targetThen bool   // the target exists when the part copy fails
		wantErr    string // besides the upload left open ("": Move returns nil)
	}{
		{"part copy refused", "AccessDenied", http.StatusForbidden, false, "copy bytes=0-9 of " + from + " to part 1 of " + to},
		{"source gone, target absent", "NoSuchKey", http.StatusNotFound, false, "move " + from + " to " + to + ": neither exists"},
		{"source gone, target there", "NoSuchKey", http.StatusNotFound, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s3store.SetCopyLimits(t, 4, 5<<20)
			answer := func(w http.ResponseWriter, status int, code string) {
				w.WriteHeader(status)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, code)
			}
			f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					q := r.URL.Query()
					switch {
					case r.Method == http.MethodPut && q.Has("partNumber") && r.Header.Get("X-Amz-Copy-Source") != "": // UploadPartCopy
						answer(w, c.status, c.partCopy)
					case r.Method == http.MethodDelete && q.Has("uploadId"): // AbortMultipartUpload
						answer(w, http.StatusForbidden, "AccessDenied")
					default:
						fake.ServeHTTP(w, r)
					}
				})
			})
			var logs bytes.Buffer
			a, _ := newArchive(t, f, s3store.WithPrefix("mv"), s3store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			f.putObject(t, "mv/iot/from.parquet", []byte("0123456789"))
			if c.targetThen {
				f.putObject(t, "mv/iot/to.parquet", []byte("0123456789"))
			}
			err := a.Move(ctx, "iot/from.parquet", "iot/to.parquet")
			ups, lerr := a.ListUploads(ctx, "iot/")
			require.NoError(t, lerr)
			require.Len(t, ups, 1, "the refused abort left the copy's upload open")
			report := err
			if c.wantErr == "" {
				require.NoError(t, err)
				report = errors.New(logs.String())
			} else {
				require.ErrorContains(t, err, c.wantErr)
			}
			if c.partCopy == "NoSuchKey" && !c.targetThen {
				require.ErrorIs(t, err, parquet.ErrNotFound)
			}
			require.ErrorContains(t, report, "the failed copy's multipart upload "+ups[0].ID+" stays open")
			require.ErrorContains(t, report, "abort upload of "+to)
		})
	}
}

// TestArchiveReadOfAServerIgnoringRange: a server (or a proxy before it)
// that ignores the Range header answers a ranged GET with the whole
// object. A read is an error naming the object and the range, not the
// object's first bytes passed off as those at the offset — also when the
// answer has no Content-Length (chunked), which was read unchecked: the
// range's length of the object's first bytes passed.
func TestArchiveReadOfAServerIgnoringRange(t *testing.T) {
	for _, c := range []struct {
		name          string
		contentLength bool
	}{{"with Content-Length", true}, {"without Content-Length", false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r.Header.Del("Range")
					if !c.contentLength && r.Method == http.MethodGet {
						w = &chunkedWriter{ResponseWriter: w}
					}
					fake.ServeHTTP(w, r)
				})
			})
			a, _ := newArchive(t, f, s3store.WithReadBlockSize(4096))
			data := make([]byte, 3*4096)
			for i := range data {
				data[i] = byte(i / 7)
			}
			require.NoError(t, a.PutAtomic(ctx, "p/f", data))
			o, err := a.Open(ctx, "p/f")
			require.NoError(t, err)
			defer o.Close()
			for _, n := range []int{100, 4096} { // through the block cache, and straight
				p := make([]byte, n)
				got, err := o.ReadAt(p, 5000)
				if err == nil {
					require.Equal(t, data[5000:5000+n], p[:got], "read of %d bytes at 5000", n)
				}
				require.ErrorContains(t, err, "s3://"+testBucket+"/p/f")
				require.ErrorContains(t, err, "bytes=")
			}
		})
	}
}

// chunkedWriter drops the Content-Length of a response and sends its
// body chunked, as some proxies do.
type chunkedWriter struct {
	http.ResponseWriter
	wroteHeader bool
}

func (w *chunkedWriter) WriteHeader(code int) {
	w.wroteHeader = true
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
	w.ResponseWriter.(http.Flusher).Flush()
}

func (w *chunkedWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Regression: with no credentials given or in the environment, on a
// machine whose instance metadata endpoint answers 403, requests failed
// with "access denied (check the access key and secret)": the metadata
// endpoint's 403 read as the server refusing a key nobody gave. The error
// says no credentials were found, and names the bucket and endpoint.
func TestArchiveWithoutCredentialsSaysSo(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(imds.Close)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_EC2_METADATA_DISABLED", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
	f := newFakeS3(t)
	var logged bytes.Buffer
	a, err := s3store.NewArchive(context.Background(), testBucket,
		s3store.WithEndpoint(f.URL), s3store.WithPathStyle(true), s3store.WithRegion("us-east-1"),
		s3store.WithLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	_, err = a.List(context.Background(), "")
	require.ErrorIs(t, err, s3store.ErrNoCredentials)
	require.NotErrorIs(t, err, s3store.ErrAccessDenied)
	require.ErrorContains(t, err, "s3://"+testBucket+"/")
	require.ErrorContains(t, err, f.URL)
	// The SDK's own warning goes to the archive's logger at debug
	// level, not to stderr before the error (TestBuiltBinary).
	require.Contains(t, logged.String(), `level=DEBUG msg="aws sdk: falling back to IMDSv1: `)
}

// TestArchiveRefusesBadNamesAsTheMemoryArchive: every S3 archive method
// that takes an object name refuses a name that is not a clean relative
// path with the error the memory (and local) archive gives, but for the
// archive it names, wrapping ErrBadName. Bug: the S3 archive had its own
// check, worded differently ("s3 archive: bad archive file name: ..."),
// naming neither the bucket and prefix nor the operation.
func TestArchiveRefusesBadNamesAsTheMemoryArchive(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, newFakeS3(t), s3store.WithPrefix("archive"))
	mem := parquet.NewMemArchive()
	what := "s3 archive s3://" + testBucket + "/archive/"
	type archive interface {
		parquet.Archive
		parquet.Uploader
		parquet.Mover
		parquet.Deleter
	}
	const other = "p/shard-000001/b.parquet"
	for _, bad := range []string{"", ".", "/abs/a.parquet", "../a.parquet", "p/../a.parquet", "p//a.parquet", "p/", "p/./a.parquet", "p/.tmp-a.parquet"} {
		for op, call := range map[string]func(a archive) error{
			"open":          func(a archive) error { _, err := a.Open(ctx, bad); return err },
			"put":           func(a archive) error { return a.PutAtomic(ctx, bad, []byte("x")) },
			"create upload": func(a archive) error { _, err := a.CreateUpload(ctx, bad); return err },
			"upload part": func(a archive) error {
				_, err := a.UploadPart(ctx, bad, "u1", 1, 0, []byte("x"))
				return err
			},
			"complete":     func(a archive) error { return a.CompleteUpload(ctx, bad, "u1", nil) },
			"abort upload": func(a archive) error { return a.AbortUpload(ctx, bad, "u1") },
			"move from":    func(a archive) error { return a.Move(ctx, bad, other) },
			"move to":      func(a archive) error { return a.Move(ctx, other, bad) },
			"delete":       func(a archive) error { return a.Delete(ctx, other, bad) },
		} {
			t.Run(op+"/"+bad, func(t *testing.T) {
				err, memErr := call(a), call(mem)
				require.ErrorIs(t, err, parquet.ErrBadName)
				require.ErrorIs(t, memErr, parquet.ErrBadName)
				require.ErrorContains(t, err, what+": ")
				require.Equal(t, strings.TrimPrefix(memErr.Error(), "memory archive"), strings.TrimPrefix(err.Error(), what))
			})
		}
	}
}

// TestArchiveListsNoTempNames: an object or multipart upload whose name
// is a local temp file's (".tmp-*"), put in the archive by another tool
// (a folder synced up with its temp files), is in none of the S3
// archive's listings, as in the local archive's, so nothing that acts on
// what it lists (a writer's Restore, a compaction's cleanup of staging)
// calls the archive with a name every archive refuses. Bug: the S3
// archive took and listed such names, and a folder it was synced to hid
// them and swept them as a crashed writer's.
func TestArchiveListsNoTempNames(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	a, _ := newArchive(t, f, s3store.WithPrefix("archive"))
	const staging = "_tflo/staging/plant/shard-000001/"
	f.putObject(t, "archive/"+staging+"rec-1", []byte("r"))
	f.putObject(t, "archive/"+staging+".tmp-rec-2-111", []byte("half"))
	_, err := f.Raw.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(testBucket), Key: aws.String("archive/" + staging + ".tmp-up")})
	require.NoError(t, err)
	_, err = a.CreateUpload(ctx, staging+"up")
	require.NoError(t, err)

	objs, err := a.List(ctx, staging)
	require.NoError(t, err)
	require.Len(t, objs, 1, "%+v", objs)
	require.Equal(t, staging+"rec-1", objs[0].Name)
	page, err := a.ListPage(ctx, staging, "", 10)
	require.NoError(t, err)
	require.Len(t, page, 1, "%+v", page)
	require.Equal(t, staging+"rec-1", page[0].Name)
	ups, err := a.ListUploads(ctx, staging)
	require.NoError(t, err)
	require.Len(t, ups, 1, "%+v", ups)
	require.Equal(t, staging+"up", ups[0].Name)
}
