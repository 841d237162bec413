package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

const testBucket = "tflo-state"

// fakeS3 is an in-process S3-compatible server (gofakes3 over s3mem) on a
// loopback port, with a raw client for inspecting and tampering with
// objects behind the store's back.
type fakeS3 struct {
	URL string
	Raw *awss3.Client
}

func newFakeS3(t testing.TB) *fakeS3 {
	t.Helper()
	return newFakeS3Behind(t, nil)
}

// newFakeS3Behind is newFakeS3 whose requests pass through front (nil:
// none), which hands the ones it does not answer itself to fake.
func newFakeS3Behind(t testing.TB, front func(fake http.Handler) http.Handler) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	var h http.Handler = gofakes3.New(backend).Server()
	if front != nil {
		h = front(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	require.NoError(t, backend.CreateBucket(testBucket))
	f := &fakeS3{URL: srv.URL}
	f.Raw = awss3.New(awss3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		UsePathStyle: true,
		Credentials:  aws.AnonymousCredentials{},
	})
	return f
}

// opts returns the options that point a store at the fake server.
func (f *fakeS3) opts(extra ...s3store.Option) []s3store.Option {
	return append([]s3store.Option{
		s3store.WithEndpoint(f.URL),
		s3store.WithPathStyle(true),
		s3store.WithRegion("us-east-1"),
		s3store.WithStaticCredentials("AKIDTEST", "test-secret", ""),
	}, extra...)
}

// store opens a Store on the fake server with a request counter.
func (f *fakeS3) store(t testing.TB, extra ...s3store.Option) (*s3store.Store, *s3store.RequestCounter) {
	t.Helper()
	var rc s3store.RequestCounter
	st, err := s3store.New(context.Background(), testBucket, f.opts(append([]s3store.Option{s3store.WithAPIOptions(rc.Register)}, extra...)...)...)
	require.NoError(t, err)
	return st, &rc
}

// objectNames lists the bucket's object keys under prefix.
func (f *fakeS3) objectNames(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := f.Raw.ListObjectsV2(context.Background(), &awss3.ListObjectsV2Input{Bucket: aws.String(testBucket), Prefix: aws.String(prefix)})
	require.NoError(t, err)
	var names []string
	for _, o := range out.Contents {
		names = append(names, aws.ToString(o.Key))
	}
	sort.Strings(names)
	return names
}

func (f *fakeS3) getObject(t testing.TB, key string) []byte {
	t.Helper()
	out, err := f.Raw.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(testBucket), Key: aws.String(key)})
	require.NoError(t, err)
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	require.NoError(t, err)
	return b
}

func (f *fakeS3) putObject(t testing.TB, key string, body []byte) {
	t.Helper()
	_, err := f.Raw.PutObject(context.Background(), &awss3.PutObjectInput{Bucket: aws.String(testBucket), Key: aws.String(key), Body: bytes.NewReader(body)})
	require.NoError(t, err)
}

// snap builds a distinct snapshot for key i of generation g.
func snap(i, g int) streaming.Snapshot {
	return streaming.Snapshot{
		Meta: streaming.SnapshotMeta{
			FormatVersion:   streaming.SnapshotFormatVersion,
			CursorType:      "kafka",
			Cursor:          fmt.Appendf(nil, "offset-%d-%d", g, i),
			Epoch:           streaming.Epoch(g),
			CreatedUnixNano: int64(1_700_000_000_000_000_000 + i),
		},
		Data: bytes.Repeat(fmt.Appendf(nil, "state %d/%d;", i, g), 1+i%7),
	}
}

func batch(n, g int) []streaming.KeyedSnapshot {
	items := make([]streaming.KeyedSnapshot, n)
	for i := range items {
		items[i] = streaming.KeyedSnapshot{Key: fmt.Appendf(nil, "sensor/%06d", i), Snapshot: snap(i, g)}
	}
	return items
}

// shardKey is key i of shard kafka/central/readings/0 in the form a
// streaming.Checkpointer writes, so the Store keeps it in that shard's
// own manifest.
func shardKey(i int) []byte {
	return []byte(streaming.CheckpointPieceKey("kafka/central/readings/0", 1, 1, i))
}

// shardBatch is batch with shard keys.
func shardBatch(n, g int) []streaming.KeyedSnapshot {
	items := make([]streaming.KeyedSnapshot, n)
	for i := range items {
		items[i] = streaming.KeyedSnapshot{Key: shardKey(i), Snapshot: snap(i, g)}
	}
	return items
}
