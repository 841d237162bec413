package archiveloc_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/testsuite/s3test"
)

// TestS3ResponseTimeoutSetting: the settings' response_timeout reaches
// the archive's client: a listing of a server that never answers fails,
// naming the prefix and the timeout, instead of waiting for good (the
// context here has no deadline, as a sink's background upload's has none).
// Settings from the TFLO_S3_* variables carry it from
// TFLO_S3_RESPONSE_TIMEOUT (bug: there was no such variable, so the
// archive tools and backfills always waited the 1m default).
func TestS3ResponseTimeoutSetting(t *testing.T) {
	c := s3test.SilentSettings(t, 200*time.Millisecond)
	listFails := func(t *testing.T, c archiveloc.S3) {
		loc, err := archiveloc.Parse("s3://arch/events")
		require.NoError(t, err)
		a, err := archiveloc.Open(context.Background(), loc, c)
		require.NoError(t, err)
		err = s3test.AwaitErr(t, "the listing", func(ctx context.Context) error { _, err := a.List(ctx, "day=1/"); return err })
		require.ErrorIs(t, err, s3.ErrResponseTimeout)
		require.ErrorContains(t, err, "s3 list s3://arch/events/day=1/*")
		require.ErrorContains(t, err, "waited 200ms")
	}
	t.Run("settings", func(t *testing.T) { listFails(t, c) })
	t.Run("variables", func(t *testing.T) {
		for k, v := range map[string]string{archiveloc.EnvEndpoint: c.Endpoint, archiveloc.EnvRegion: c.Region, archiveloc.EnvAccessKeyEnv: c.AccessKeyEnv,
			archiveloc.EnvSecretKeyEnv: c.SecretKeyEnv, archiveloc.EnvCAFile: "", archiveloc.EnvResponseTimeout: "200ms"} {
			t.Setenv(k, v)
		}
		env, err := archiveloc.S3FromEnv(os.LookupEnv)
		require.NoError(t, err)
		require.Equal(t, c, env)
		listFails(t, env)
	})

	c.ResponseTimeout = -time.Second
	require.ErrorContains(t, c.Validate(), "s3 settings: response_timeout -1s is negative")
}
