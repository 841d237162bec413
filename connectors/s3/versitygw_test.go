package s3_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/parquet/archivetest"
	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

// versitygw is a real S3-compatible server (posix backend, SigV4 checks)
// running as a child process on a loopback port (testsuite/s3test).
type versitygw struct{ *s3test.Server }

// startVersitygw starts a server with a fresh posix folder holding
// buckets; it is stopped when the test ends.
func startVersitygw(t *testing.T, buckets ...string) *versitygw {
	t.Helper()
	return &versitygw{s3test.Start(t, buckets...)}
}

func (v *versitygw) opts(extra ...s3store.Option) []s3store.Option {
	return append([]s3store.Option{
		s3store.WithEndpoint(v.URL),
		s3store.WithPathStyle(true),
		s3store.WithRegion("us-east-1"),
		s3store.WithStaticCredentials(v.AccessKey, v.SecretKey, ""),
	}, extra...)
}

func TestVersitygw(t *testing.T) {
	v := startVersitygw(t, "state")
	ctx := context.Background()
	prefixes := 0
	fresh := func() string { prefixes++; return fmt.Sprintf("t%03d", prefixes) }

	t.Run("Conformance", func(t *testing.T) {
		statetest.Run(t, func(t *testing.T) streaming.StateStore {
			st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(fresh()))...)
			require.NoError(t, err)
			return st
		})
	})
	t.Run("CursorConformance", func(t *testing.T) {
		statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore {
			cs, err := s3store.NewCursorStore(ctx, "state", v.opts(s3store.WithPrefix(fresh()))...)
			require.NoError(t, err)
			return cs
		})
	})
	t.Run("ArchiveConformance", func(t *testing.T) {
		archivetest.Run(t, func(t *testing.T) parquet.Archive {
			a, err := s3store.NewArchive(ctx, "state", v.opts(s3store.WithPrefix(fresh()))...)
			require.NoError(t, err)
			return a
		})
	})

	t.Run("RequestCosts", func(t *testing.T) {
		var rc s3store.RequestCounter
		prefix := fresh()
		st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix), s3store.WithAPIOptions(rc.Register))...)
		require.NoError(t, err)
		items := batch(10_000, 1)
		require.NoError(t, st.SaveBatch(ctx, items))
		require.LessOrEqual(t, rc.Count("PutObject"), int64(2), "%v", rc.Counts())

		var rc2 s3store.RequestCounter
		cold, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix), s3store.WithAPIOptions(rc2.Register))...)
		require.NoError(t, err)
		got, err := cold.Load(ctx, items[777].Key)
		require.NoError(t, err)
		require.Equal(t, items[777].Snapshot, got)
		require.LessOrEqual(t, rc2.Count("GetObject"), int64(2), "%v", rc2.Counts())
	})

	t.Run("ConditionalCommit", func(t *testing.T) {
		prefix := fresh()
		owner, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix))...)
		require.NoError(t, err)
		zombie, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix))...)
		require.NoError(t, err)
		require.NoError(t, zombie.SaveBatch(ctx, batch(10, 1)))
		require.NoError(t, owner.SaveBatch(ctx, batch(10, 2)))
		err = zombie.SaveBatch(ctx, batch(10, 3))
		require.ErrorIs(t, err, s3store.ErrConflict)
		require.NotErrorIs(t, err, streaming.ErrFenced, "a lost race is retryable; epochs decide who is fenced")
	})

	t.Run("ManifestPutWhoseReplyIsLostCommits", func(t *testing.T) {
		st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(fresh()), s3store.WithAPIOptions(loseReply("/manifest")))...)
		require.NoError(t, err)
		for g := 1; g <= 2; g++ {
			require.NoError(t, st.SaveBatch(ctx, batch(10, g)), "commit %d", g)
			got, err := st.Load(ctx, []byte("sensor/000003"))
			require.NoError(t, err)
			require.Equal(t, snap(3, g), got)
		}
	})

	t.Run("ClaimEpoch", func(t *testing.T) {
		prefix := fresh()
		statetest.RunEpochClaimer(t, func(t *testing.T) streaming.EpochClaimer {
			st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix))...)
			require.NoError(t, err)
			return st
		})
	})

	t.Run("SharedPrefixCheckpoints", func(t *testing.T) {
		for _, writers := range []int{2, 3} {
			t.Run(fmt.Sprintf("%d writers", writers), func(t *testing.T) {
				prefix := fresh()
				sharedPrefixWriters(t, writers, 2, 15, func(t *testing.T) *s3store.Store {
					st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix))...)
					require.NoError(t, err)
					return st
				})
			})
		}
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		const wrong = "wrong-secret-never-printed-77c1"
		cases := []struct {
			name   string
			access string
			secret string
		}{
			{"wrong secret", v.AccessKey, wrong},
			{"unknown access key", "AKIDUNKNOWN", wrong},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				st, err := s3store.New(ctx, "state", s3store.WithEndpoint(v.URL), s3store.WithPathStyle(true),
					s3store.WithRegion("us-east-1"), s3store.WithStaticCredentials(tc.access, tc.secret, ""), s3store.WithPrefix("creds"))
				require.NoError(t, err)
				err = st.SaveBatch(ctx, batch(3, 1))
				require.ErrorIs(t, err, s3store.ErrAccessDenied)
				msg := err.Error()
				t.Logf("error: %s", msg)
				require.Contains(t, msg, "s3://state/creds/")
				require.Contains(t, msg, v.URL)
				require.NotContains(t, msg, tc.secret)
				require.NotContains(t, msg, v.SecretKey)

				_, err = st.Load(ctx, []byte("k"))
				require.ErrorIs(t, err, s3store.ErrAccessDenied)
				require.NotContains(t, err.Error(), tc.secret)
			})
		}
	})

	t.Run("UnsignedPayload", func(t *testing.T) {
		// The server checks the signature of the headers; the body is sent
		// as UNSIGNED-PAYLOAD over plain http (seekable bodies, so the SDK
		// accepts it).
		var rc s3store.RequestCounter
		var mu sync.Mutex
		payloadHashes := map[string]bool{}
		capture := func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("test/capture",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					if req, ok := in.Request.(*smithyhttp.Request); ok && middleware.GetOperationName(ctx) == "PutObject" {
						mu.Lock()
						payloadHashes[req.Header.Get("X-Amz-Content-Sha256")] = true
						mu.Unlock()
					}
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		}
		st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(fresh()), s3store.WithUnsignedPayload(true), s3store.WithAPIOptions(rc.Register, capture))...)
		require.NoError(t, err)
		require.NoError(t, st.SaveBatch(ctx, batch(1000, 1)))
		got, err := st.Load(ctx, []byte("sensor/000999"))
		require.NoError(t, err)
		require.Equal(t, snap(999, 1), got)
		require.Equal(t, int64(2), rc.Count("PutObject"))
		require.Equal(t, map[string]bool{"UNSIGNED-PAYLOAD": true}, payloadHashes)

		bad, err := s3store.New(ctx, "state", s3store.WithEndpoint(v.URL), s3store.WithPathStyle(true), s3store.WithRegion("us-east-1"),
			s3store.WithStaticCredentials(v.AccessKey, "wrong-unsigned-secret", ""), s3store.WithUnsignedPayload(true), s3store.WithPrefix(fresh()))
		require.NoError(t, err)
		require.ErrorIs(t, bad.SaveBatch(ctx, batch(3, 1)), s3store.ErrAccessDenied, "headers are still signed")
	})

	t.Run("StandardChainCredentials", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "none")
		t.Setenv("AWS_ACCESS_KEY_ID", v.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", v.SecretKey)
		t.Setenv("AWS_REGION", "us-east-1")
		t.Setenv("AWS_CONFIG_FILE", missing)
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		st, err := s3store.New(ctx, "state", s3store.WithEndpoint(v.URL), s3store.WithPathStyle(true), s3store.WithPrefix(fresh()))
		require.NoError(t, err)
		require.NoError(t, st.SaveBatch(ctx, batch(3, 1)))
		got, err := st.Load(ctx, []byte("sensor/000002"))
		require.NoError(t, err)
		require.Equal(t, snap(2, 1), got)

		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret-that-is-wrong")
		bad, err := s3store.New(ctx, "state", s3store.WithEndpoint(v.URL), s3store.WithPathStyle(true), s3store.WithPrefix(fresh()))
		require.NoError(t, err)
		_, err = bad.Load(ctx, []byte("k"))
		require.ErrorIs(t, err, s3store.ErrAccessDenied)
		require.NotContains(t, err.Error(), "env-secret-that-is-wrong")
	})

	t.Run("NoSuchBucket", func(t *testing.T) {
		st, err := s3store.New(ctx, "absent", v.opts()...)
		require.NoError(t, err)
		_, err = st.Load(ctx, []byte("k"))
		require.ErrorIs(t, err, s3store.ErrNoSuchBucket)
		require.ErrorContains(t, err, "s3://absent/manifest")
	})

	t.Run("RawClientSeesLayout", func(t *testing.T) {
		prefix := fresh()
		st, err := s3store.New(ctx, "state", v.opts(s3store.WithPrefix(prefix))...)
		require.NoError(t, err)
		require.NoError(t, st.SaveBatch(ctx, batch(5, 1)))
		raw := awss3.New(awss3.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(v.URL), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(v.AccessKey, v.SecretKey, ""),
		})
		out, err := raw.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String("state"), Prefix: aws.String(prefix + "/")})
		require.NoError(t, err)
		var names []string
		for _, o := range out.Contents {
			names = append(names, strings.TrimPrefix(aws.ToString(o.Key), prefix+"/"))
		}
		require.Len(t, names, 2, "one manifest and one segment: %v", names)
		require.Contains(t, names, "manifest")
		require.True(t, strings.HasPrefix(names[1], "seg/") || strings.HasPrefix(names[0], "seg/"), "%v", names)
	})
}
