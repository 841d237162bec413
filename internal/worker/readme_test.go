package worker_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// README.md shows the SMA job's spec "whole", the line `worker --check`
// prints for it and what `--print-config` prints with
// TFLO_SOURCE_KAFKA_TOPIC=trades: a newcomer copies them and compares.
// This holds each to the repository's spec and to the worker's output.
func TestREADMEWorkerExamples(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	readme := string(b)
	const specPath = "workers/pipelines/sma-readings.yaml"
	t.Chdir(root) // the README's commands run from the repository's root
	for _, v := range []string{"KAFKA_BROKERS", "STATE_DIR", "TEMPORAL_ADDRESS", "TEMPORAL_CONFIG_FILE", "TFLO_SOURCE_KAFKA_TOPIC"} {
		t.Setenv(v, "") // restored after the test
		require.NoError(t, os.Unsetenv(v))
	}

	t.Run("the spec shown whole is the file", func(t *testing.T) {
		m := regexp.MustCompile("(?s)sma-readings.yaml\\), whole:\n\n```yaml\n(.*?)```").FindStringSubmatch(readme)
		require.NotNil(t, m, "README.md no longer shows sma-readings.yaml whole")
		file, err := os.ReadFile(specPath)
		require.NoError(t, err)
		// The file's opening comment is not part of what README shows.
		body := regexp.MustCompile(`(?m)\A(?:#.*\n)+`).ReplaceAllString(string(file), "")
		require.Equal(t, body, m[1])
	})

	t.Run("--check prints what README shows", func(t *testing.T) {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(specPath) + `: pipeline .*$`).FindString(readme)
		require.NotEmpty(t, m, "README.md no longer shows the --check line")
		var errOut logtest.Buffer
		out := stdout(t, func() {
			require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", specPath, "--check"}, &errOut), errOut.String())
		})
		require.Equal(t, m+"\n", out)
	})

	t.Run("--print-config prints the values and origins README shows", func(t *testing.T) {
		m := regexp.MustCompile("(?s)```\n\\$ TFLO_SOURCE_KAFKA_TOPIC=trades bin/worker --pipeline " + regexp.QuoteMeta(specPath) + " --print-config\n(.*?)```").FindStringSubmatch(readme)
		require.NotNil(t, m, "README.md no longer shows the --print-config example")
		t.Setenv("TFLO_SOURCE_KAFKA_TOPIC", "trades")
		var errOut logtest.Buffer
		out := stdout(t, func() {
			require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", specPath, "--print-config"}, &errOut), errOut.String())
		})
		printed := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			printed[strings.Join(strings.Fields(l), " ")] = true
		}
		shown := 0
		for _, l := range strings.Split(m[1], "\n") {
			l = strings.Join(strings.Fields(l), " ")
			if l == "" || l == "..." || strings.HasPrefix(l, "worker_id ") { // worker_id's default is the host name
				continue
			}
			shown++
			require.True(t, printed[l], "README.md shows %q; --print-config printed:\n%s", l, out)
		}
		require.NotZero(t, shown)
	})
}
