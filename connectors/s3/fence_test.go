package s3_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// TestZombieLosesTheFenceToARefusedManifestPut: a zombie owner's
// checkpoint fence reread the shard's manifest (its epoch still the
// zombie's), and a newer owner committed before the zombie's manifest PUT.
// The PUT, conditional on the ETag the fence read, is refused (412), and
// the zombie is told it lost the shard (a NotOwnerError naming it); the
// newer owner's manifest stays as it committed it.
func TestZombieLosesTheFenceToARefusedManifestPut(t *testing.T) {
	ctx := context.Background()
	v := startVersitygw(t, "state")
	const shard = "kafka/p/readings/0"
	open := func(epoch streaming.Epoch, extra ...s3store.Option) (*streaming.Checkpointer, *spreadSource) {
		return openOwnerAt(ctx, t, shard, epoch, v.opts(extra...)...)
	}
	raw := awss3.New(awss3.Options{Region: "us-east-1", BaseEndpoint: aws.String(v.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(v.AccessKey, v.SecretKey, "")})
	object := func(key string) (body []byte, etag string) {
		out, err := raw.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String("state"), Key: aws.String(key)})
		require.NoError(t, err)
		defer out.Body.Close()
		body, err = io.ReadAll(out.Body)
		require.NoError(t, err)
		return body, aws.ToString(out.ETag)
	}

	hook := &manifestPutHook{}
	zombie, zsrc := open(1, s3store.WithAPIOptions(hook.register))
	zsrc.add()
	_, err := zombie.Checkpoint(ctx)
	require.NoError(t, err)

	// Between the zombie's fence (its GET of the manifest) and its
	// manifest PUT, a newer owner takes the shard over: it restores the
	// zombie's checkpoint and commits one of its own.
	next, nsrc := open(2)
	var committed streaming.CheckpointResult
	var nextErr error
	var newer []byte
	var newerTag, manifestKey string
	hook.arm(func(key string) {
		if _, nextErr = next.Restore(ctx); nextErr != nil {
			return
		}
		nsrc.add()
		nsrc.add()
		committed, nextErr = next.Checkpoint(ctx)
		manifestKey = key
		newer, newerTag = object(key)
	})
	zsrc.add()
	_, err = zombie.Checkpoint(ctx)
	require.True(t, hook.fired(), "the zombie's fence read the manifest and PUT it")
	require.NoError(t, nextErr, "the newer owner's restore and checkpoint")

	require.ErrorIs(t, err, streaming.ErrFenced)
	var noe *streaming.NotOwnerError
	require.ErrorAs(t, err, &noe)
	require.Equal(t, shard, noe.Shard)
	require.Equal(t, streaming.Epoch(1), noe.Epoch)
	require.Equal(t, streaming.Epoch(2), noe.CurrentEpoch)
	require.Equal(t, streaming.StageSaveState, noe.Stage)
	require.ErrorContains(t, err, `shard "`+shard+`"`)

	body, tag := object(manifestKey)
	require.Equal(t, newerTag, tag, "the zombie's PUT replaced the newer owner's manifest")
	require.Equal(t, newer, body)
	check, csrc := open(3)
	info, err := check.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, committed.ID, info.ID, "the newer owner's checkpoint")
	require.Equal(t, streaming.Epoch(2), info.Epoch)
	require.Equal(t, uint64(3), csrc.n, "the newer owner's count: 1 restored, 2 added")
}

// manifestPutHook is S3 client middleware (s3store.WithAPIOptions)
// that, once armed, runs hook (once) just before the first PUT of a
// shard's manifest object that follows a GET of it: between a
// checkpoint's fence, which rereads the manifest, and the manifest's
// conditional PUT. hook is given the object's key.
type manifestPutHook struct {
	mu   sync.Mutex
	hook func(key string)
	read bool // armed, and the manifest was read since
	done bool
}

func (h *manifestPutHook) arm(hook func(key string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hook, h.read = hook, false
}

func (h *manifestPutHook) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

func (h *manifestPutHook) register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("test/manifestPutHook",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			isManifest := func(key *string) bool {
				k := aws.ToString(key)
				return strings.HasPrefix(k, "shards/") && strings.HasSuffix(k, "/manifest")
			}
			var run func(string)
			var key string
			h.mu.Lock()
			switch p := in.Parameters.(type) {
			case *awss3.GetObjectInput:
				if h.hook != nil && isManifest(p.Key) {
					h.read = true
				}
			case *awss3.PutObjectInput:
				if h.hook != nil && h.read && isManifest(p.Key) {
					run, key, h.hook, h.done = h.hook, aws.ToString(p.Key), nil, true
				}
			}
			h.mu.Unlock()
			if run != nil {
				run(key)
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}
