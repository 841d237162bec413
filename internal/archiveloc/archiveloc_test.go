package archiveloc

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want Location
		err  string
	}{
		{in: "file:///var/tflo/archive", want: Location{Scheme: "file", Dir: "/var/tflo/archive"}},
		{in: "file://localhost/tmp/a", want: Location{Scheme: "file", Dir: "/tmp/a"}},
		{in: "s3://bucket", want: Location{Scheme: "s3", Bucket: "bucket"}},
		{in: "s3://bucket/iot/archive/", want: Location{Scheme: "s3", Bucket: "bucket", Prefix: "iot/archive"}},
		{in: "", err: "empty"},
		{in: "/var/tflo/archive", err: "no scheme"},
		{in: "influx", err: "no scheme"},
		{in: "file://relative/dir", err: "absolute path after three slashes"},
		// '#' and '?' in a folder name are escaped; bare, they began a
		// fragment or a query that was dropped, and the location named
		// another folder (/data/run for file:///data/run#1).
		{in: "file:///data/run%231", want: Location{Scheme: "file", Dir: "/data/run#1"}},
		{in: "file:///data/a%3Fb c", want: Location{Scheme: "file", Dir: "/data/a?b c"}},
		{in: "file:///data/run#1", err: "only a folder"},
		{in: "file:///data/a?b", err: "only a folder"},
		{in: "s3:///prefix", err: "no bucket"},
		{in: "s3://b/p?x=1", err: "only a bucket and a prefix"},
		{in: "s3://b/p?", err: "only a bucket and a prefix"},
		// S3 keys are literal: this location read keys under "x/../prod/",
		// which an allowlist of s3://b/prod let through (it cleaned the
		// path to "prod").
		{in: "s3://b/x/../prod", err: "no '.' or '..' elements"},
		{in: "s3://b/prod/./x", err: "no '.' or '..' elements"},
		{in: "s3://b/prod/..", err: "no '.' or '..' elements"},
		{in: "gs://bucket/p", err: `unsupported scheme "gs"`},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), Examples) {
					t.Fatalf("Parse(%q) = %+v, %v; want an error with %q and the examples", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if again, err := Parse(got.String()); err != nil || again != got {
				t.Fatalf("String() %q does not parse back: %+v, %v", got.String(), again, err)
			}
		})
	}
}

// lookupIn looks variables up in env, as os.LookupEnv in the environment.
func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestS3Settings(t *testing.T) {
	env := map[string]string{EnvEndpoint: "http://127.0.0.1:9000", EnvAccessKeyEnv: "K"}
	c, err := S3FromEnv(lookupIn(env))
	require.NoError(t, err)
	if c.Endpoint != "http://127.0.0.1:9000" {
		t.Fatalf("settings %+v", c)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("half a key pair: %v", err)
	}
}

// TestS3FromEnvRefusesABadResponseTimeout: a TFLO_S3_RESPONSE_TIMEOUT
// that is not a Go duration, or is negative, is an error naming the
// variable and the value; unset or empty is the default (0).
func TestS3FromEnvRefusesABadResponseTimeout(t *testing.T) {
	for v, want := range map[string]string{
		"soon": `TFLO_S3_RESPONSE_TIMEOUT "soon": not a Go duration (e.g. 30s or 2m)`,
		"30":   `TFLO_S3_RESPONSE_TIMEOUT "30": not a Go duration (e.g. 30s or 2m)`,
		"-1s":  `TFLO_S3_RESPONSE_TIMEOUT "-1s": negative (unset or 0: the default, 1m0s)`,
	} {
		c, err := S3FromEnv(lookupIn(map[string]string{EnvResponseTimeout: v, EnvEndpoint: "http://127.0.0.1:9000"}))
		require.EqualError(t, err, want)
		// The other settings come with the error, for a caller given the
		// timeout another way (starter archive --s3-response-timeout).
		require.Equal(t, S3{Endpoint: "http://127.0.0.1:9000"}, c, v)
	}
	for v, want := range map[string]time.Duration{"": 0, "0": 0, "90s": 90 * time.Second} {
		c, err := S3FromEnv(lookupIn(map[string]string{EnvResponseTimeout: v}))
		require.NoError(t, err, v)
		require.Equal(t, want, c.ResponseTimeout, v)
	}
}

// OpenExisting, the readers' open, refuses a local folder that does not
// exist (ErrNotFound, naming it) and does not create it; Open, the
// writers', creates it.
func TestOpenExistingRefusesAMissingFolder(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "archive")
	loc, err := Parse("file://" + dir)
	require.NoError(t, err)

	_, err = OpenExisting(ctx, loc, S3{})
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "archive file://"+dir+": no such folder")
	require.NoDirExists(t, dir)
	_, _, err = Resolver(S3{})("file://" + dir)
	require.ErrorIs(t, err, ErrNotFound, "backfills read through the resolver")
	require.NoDirExists(t, dir)

	_, err = Open(ctx, loc, S3{})
	require.NoError(t, err)
	require.DirExists(t, dir, "a writer creates its folder")
	a, err := OpenExisting(ctx, loc, S3{})
	require.NoError(t, err)
	files, err := a.List(ctx, "")
	require.NoError(t, err)
	require.Empty(t, files)
}

// An s3:// archive whose settings name key variables that are unset used
// to be opened with two empty keys, which fall back to the AWS standard
// chain: other credentials than the settings name (one unset variable
// was refused without saying which). Open now names the variable.
func TestOpenS3RefusesAnUnsetKeyVariable(t *testing.T) {
	ctx := context.Background()
	loc, err := Parse("s3://bucket/iot")
	require.NoError(t, err)
	t.Setenv("TFLO_TEST_ARCHIVE_AK", "")
	t.Setenv("TFLO_TEST_ARCHIVE_SK", "")
	c := S3{Endpoint: "http://127.0.0.1:9", Region: "us-east-1", AccessKeyEnv: "TFLO_TEST_ARCHIVE_AK", SecretKeyEnv: "TFLO_TEST_ARCHIVE_SK"}
	_, err = Open(ctx, loc, c)
	require.ErrorContains(t, err, "archive s3://bucket/iot: s3 access_key_env names TFLO_TEST_ARCHIVE_AK, which is unset or empty")
	t.Setenv("TFLO_TEST_ARCHIVE_AK", "key")
	t.Setenv("TFLO_TEST_ARCHIVE_SK", "")
	_, err = OpenExisting(ctx, loc, c)
	require.ErrorContains(t, err, "secret_key_env names TFLO_TEST_ARCHIVE_SK, which is unset or empty")
	t.Setenv("TFLO_TEST_ARCHIVE_SK", "secret")
	_, err = Open(ctx, loc, c)
	require.NoError(t, err)
}
