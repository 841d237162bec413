package pipeline

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/testsuite/s3test"
)

// TestDurableS3ResponseTimeout: state.durable.s3.response_timeout reaches
// the store's client: a load from a server that never answers fails,
// naming the manifest and the timeout, instead of waiting for good.
func TestDurableS3ResponseTimeout(t *testing.T) {
	c := s3test.SilentSettings(t, 200*time.Millisecond)
	state := State{Durable: Durable{S3: &S3Store{Bucket: "ckpt", Prefix: "edge", Endpoint: c.Endpoint, Region: c.Region,
		AccessKeyEnv: c.AccessKeyEnv, SecretKeyEnv: c.SecretKeyEnv, ResponseTimeout: c.ResponseTimeout}}}
	st, closeStore, err := openDurable(context.Background(), state, nil, slog.Default(), nil)
	require.NoError(t, err)
	defer closeStore()
	err = s3test.AwaitErr(t, "the load", func(ctx context.Context) error { _, err := st.Load(ctx, []byte("k")); return err })
	require.ErrorIs(t, err, s3.ErrResponseTimeout)
	require.ErrorContains(t, err, "s3 get s3://ckpt/edge/manifest")
	require.ErrorContains(t, err, "waited 200ms")
}
