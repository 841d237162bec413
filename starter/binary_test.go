package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// testVersion is what the test stamps into the binaries, as make build
// stamps git describe.
const testVersion = "v0.0.0-binary-test"

// buildBinaries builds starter and the worker binaries (the pipeline
// worker and the simulator) into a temporary folder with the version
// stamped by the linker, as `make build` does.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, toolbin.GoBuild(dir, "-X github.com/tflo-io/tflo/internal/version.Version="+testVersion,
		"./starter", "./workers/cmd/worker", "./workers/cmd/simulator"))
	return dir
}

// exitOf runs a binary with env (and nothing else of the test's
// environment but PATH) and returns what a user sees.
func exitOf(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + home}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, out.String(), errOut.String()}
}

// TestBuiltBinary runs the built starter as a user does and reads its
// real exit code, stdout and stderr. Bug it guards against: every failure
// exited silently (root set SilenceErrors and main only exited with the
// code), unknown commands and extra arguments were not usage errors, and
// the in-process tests missed it because their helper printed the error
// itself.
func TestBuiltBinary(t *testing.T) {
	dir := buildBinaries(t)
	starter := filepath.Join(dir, "starter")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	// An instance metadata service that has no token to give (as on a
	// machine that is no EC2 instance behind a proxy), and the S3 server.
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	t.Cleanup(imds.Close)
	cases := []struct {
		name   string
		env    []string
		args   []string
		code   int
		stderr []string // lines stderr holds, in order, or prefixes with "..."
		stdout string   // a substring of stdout ("" : stdout is empty)
	}{
		{"unreachable Temporal", nil, []string{"--address", "127.0.0.1:1", "pipeline", "status"}, exitFailure,
			[]string{`Error: connect to temporal at 127.0.0.1:1 namespace=default: failed reaching server: ...`}, ""},
		{"unknown command", nil, []string{"pipelin"}, exitUsage,
			[]string{`Error: unknown command "pipelin" for "starter" (did you mean "pipeline"?)`, "Run 'starter --help' for usage."}, ""},
		{"unknown subcommand", nil, []string{"pipeline", "statsu"}, exitUsage,
			[]string{`Error: unknown command "statsu" for "starter pipeline" (did you mean "status"?)`, "Run 'starter pipeline --help' for usage."}, ""},
		{"missing required flag", nil, []string{"backfill", "start"}, exitUsage,
			[]string{"Error: --name is required (it names the backfill for status and cancel)", "Run 'starter backfill start --help' for usage."}, ""},
		{"extra argument", nil, []string{"pipeline", "status", "extra"}, exitUsage,
			[]string{`Error: "starter pipeline status" takes no arguments, got ["extra"] (options are flags: see --help)`, "Run 'starter pipeline status --help' for usage."}, ""},
		{"extra argument after a flag", nil, []string{"workers", "--all", "extra"}, exitUsage,
			[]string{`Error: "starter workers" takes no arguments, got ["extra"] (options are flags: see --help)`, "..."}, ""},
		{"unknown flag", nil, []string{"workers", "--nope"}, exitUsage, []string{"Error: unknown flag: --nope", "..."}, ""},
		{"unknown output format", nil, []string{"workers", "-o", "xml"}, exitUsage,
			[]string{`Error: invalid argument "xml" for "-o, --output" flag: "xml" is not one of table, json, yaml`, "..."}, ""},
		{"--json and -o disagree", nil, []string{"workers", "--json", "-o", "yaml"}, exitUsage, []string{"Error: --json and -o yaml disagree: give one", "..."}, ""},
		{"demo is text only", nil, []string{"demo", "--json", "--duration", "1s"}, exitUsage, []string{"Error: starter demo prints for people only: -o json is not supported", "..."}, ""},
		{"--timeout without --wait", nil, []string{"backfill", "status", "--name", "x", "--timeout", "5s"}, exitUsage, []string{"Error: --timeout bounds --wait: add --wait", "..."}, ""},
		{"an API key on the command line", nil, []string{"workers", "--api-key", "sekret"}, exitUsage,
			[]string{"Error: --api-key would show the key in the process list: put it in TEMPORAL_API_KEY, a file named by --api-key-file, or a --profile", "..."}, ""},
		{"a missing file names the flag", nil, []string{"workers", "--tls-ca-path", missing}, exitUsage,
			[]string{`Error: temporal tls: --tls-ca-path "` + missing + `": no such file or directory`, "..."}, ""},
		{"a missing CA file names its variable", []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + missing}, []string{"workers"}, exitUsage,
			[]string{`Error: temporal tls: TEMPORAL_TLS_SERVER_CA_CERT_PATH "` + missing + `": no such file or directory`, "Run 'starter workers --help' for usage."}, ""},
		{"a missing file names the variable", []string{"TEMPORAL_TLS_CLIENT_CERT_PATH=" + missing, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + missing}, []string{"workers"}, exitUsage,
			[]string{`Error: temporal tls: TEMPORAL_TLS_CLIENT_CERT_PATH "` + missing + `": no such file or directory`, "..."}, ""},
		{"a bad S3 response timeout names its variable", []string{"TFLO_S3_RESPONSE_TIMEOUT=soon"}, []string{"archive", "ls", "--archive", "file:///nonexistent"}, exitUsage,
			[]string{`Error: TFLO_S3_RESPONSE_TIMEOUT "soon": not a Go duration (e.g. 30s or 2m)`, "Run 'starter archive ls --help' for usage."}, ""},
		// Bug: the AWS SDK's default logger printed "SDK <time> WARN falling
		// back to IMDSv1: ..." on stderr before the command's own error.
		{"S3 without credentials prints its error alone", []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL},
			[]string{"archive", "ls", "--archive", "s3://b/p", "--s3-endpoint", imds.URL, "--s3-region", "us-east-1"}, exitFailure,
			[]string{"Error: summarize the archive: list the archive's files: s3 archive: s3 list s3://b/p/* (endpoint " + imds.URL + "): operation error S3: ListObjectsV2, get identity: get credentials: ..."}, ""},
		{"an unknown profile", nil, []string{"workers", "--profile", "prod"}, exitUsage,
			[]string{`Error: --profile "prod": there is no Temporal config file to take it from ...`, "..."}, ""},
		{"--version", nil, []string{"--version"}, exitOK, nil, "starter " + testVersion + " (go"},
		{"version", nil, []string{"version"}, exitOK, nil, "starter " + testVersion + " (go"},
		{"version -o json", nil, []string{"version", "-o", "json"}, exitOK, nil, `"version": "` + testVersion + `"`},
		{"a group alone prints its help", nil, []string{"pipeline"}, exitOK, nil, "Available Commands:"},
		{"the root help lists the exit codes", nil, []string{"--help"}, exitOK, nil, "130  interrupted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := exitOf(t, starter, tc.env, tc.args...)
			assert.Equal(t, tc.code, r.code, "stdout: %s\nstderr: %s", r.out, r.err)
			if tc.stdout == "" {
				assert.Empty(t, r.out)
			} else {
				assert.Contains(t, r.out, tc.stdout)
			}
			lines := strings.Split(strings.TrimSuffix(r.err, "\n"), "\n")
			if len(tc.stderr) == 0 {
				assert.Empty(t, r.err)
				return
			}
			require.Len(t, lines, len(tc.stderr), "stderr: %s", r.err)
			for i, want := range tc.stderr {
				if p, ok := strings.CutSuffix(want, "..."); ok {
					assert.True(t, strings.HasPrefix(lines[i], p), "line %d: %q does not start with %q", i, lines[i], p)
				} else {
					assert.Equal(t, want, lines[i])
				}
			}
		})
	}

	// Every worker binary says which build it is.
	for _, w := range []string{"worker", "simulator"} {
		r := exitOf(t, filepath.Join(dir, w), nil, "--version")
		assert.Equal(t, exitOK, r.code, r.err)
		assert.True(t, strings.HasPrefix(r.out, w+" "+testVersion+" (go"), "%s --version: %q", w, r.out)
	}

	// A demo that cannot start says what is missing and how to build it,
	// and leaves --dir as it was, so the same command works once the
	// server is there. Bug: it left --dir populated, and the rerun failed
	// with "not empty".
	t.Run("demo without its servers", func(t *testing.T) {
		work := filepath.Join(t.TempDir(), "demo-data")
		for i := range 2 {
			r := exitOf(t, starter, []string{"TFLO_TEMPORAL=" + missing}, "demo", "--dir", work, "--duration", "1s")
			require.Equal(t, exitFailure, r.code, "run %d: %s", i, r.err)
			assert.True(t, strings.HasPrefix(r.err, "Error: demo: missing servers:\n  temporal (the Temporal dev server and web UI): "), r.err)
			assert.Contains(t, r.err, "`make tools`")
			assert.Contains(t, r.err, "`make demo`")
			assert.NoDirExists(t, work)
		}
	})
	t.Run("demo whose server fails", func(t *testing.T) {
		if _, err := os.Stat("/bin/false"); err != nil {
			t.Skip("no /bin/false to stand in for a server that fails")
		}
		work := t.TempDir() // exists and is empty: it stays, empty
		for i := range 2 {
			r := exitOf(t, starter, []string{"TFLO_TEMPORAL=/bin/false"}, "demo", "--dir", work, "--duration", "1s")
			require.Equal(t, exitFailure, r.code, "run %d: %s", i, r.err)
			assert.NotContains(t, r.err, "not empty", "run %d", i)
			assert.Contains(t, r.err, "temporal dev server exited during start-up")
			ents, err := os.ReadDir(work)
			require.NoError(t, err)
			assert.Empty(t, ents, "run %d left %v", i, ents)
		}
	})
}
