package s3_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/testsuite/s3test"
)

// silentS3 is gofakes3 behind a front that reads each request matching
// stall and never answers it (until the client gives up or the test
// ends): a server that accepts requests and stops answering.
func silentS3(t *testing.T, stall func(r *http.Request) bool) *fakeS3 {
	t.Helper()
	done := make(chan struct{})
	f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stall(r) {
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-r.Context().Done():
				case <-done:
				}
				return
			}
			fake.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() { close(done) }) // before the server's Close, which waits for handlers
	return f
}

func TestSilentServerFailsTheRequestAfterTheResponseTimeout(t *testing.T) {
	isList := func(r *http.Request) bool { return r.URL.Query().Has("list-type") }
	cases := []struct {
		name  string
		stall func(r *http.Request) bool
		call  func(ctx context.Context, f *fakeS3) error
		names string
	}{
		{"get", func(r *http.Request) bool { return r.Method == http.MethodGet && !isList(r) },
			func(ctx context.Context, f *fakeS3) error {
				st, _ := f.store(t, s3store.WithPrefix("to"), s3store.WithResponseTimeout(200*time.Millisecond))
				_, err := st.Load(ctx, []byte("k"))
				return err
			}, "s3 get s3://" + testBucket + "/to/manifest "},
		{"put", func(r *http.Request) bool { return r.Method == http.MethodPut },
			func(ctx context.Context, f *fakeS3) error {
				st, _ := f.store(t, s3store.WithPrefix("to"), s3store.WithResponseTimeout(200*time.Millisecond))
				return st.Save(ctx, []byte("k"), snap(1, 1))
			}, "s3 put s3://" + testBucket + "/to/seg/"},
		{"list", isList,
			func(ctx context.Context, f *fakeS3) error {
				a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("to"), s3store.WithResponseTimeout(200*time.Millisecond))...)
				require.NoError(t, err)
				_, err = a.List(ctx, "day=1/")
				return err
			}, "s3 list s3://" + testBucket + "/to/day=1/*"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := silentS3(t, c.stall)
			err := s3test.AwaitErr(t, c.name, func(ctx context.Context) error { return c.call(ctx, f) })
			require.ErrorIs(t, err, s3store.ErrResponseTimeout)
			require.ErrorContains(t, err, c.names)
			require.ErrorContains(t, err, "waited 200ms (WithResponseTimeout)")
		})
	}
}

func TestResponseTimeoutOptionConflicts(t *testing.T) {
	ctx := context.Background()
	_, err := s3store.New(ctx, testBucket, s3store.WithHTTPClient(http.DefaultClient), s3store.WithResponseTimeout(time.Second))
	require.ErrorContains(t, err, "WithHTTPClient cannot be combined with WithResponseTimeout")
	_, err = s3store.New(ctx, testBucket, s3store.WithResponseTimeout(-time.Second))
	require.ErrorContains(t, err, "response timeout -1s is negative")
}
