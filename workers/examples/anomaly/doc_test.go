package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The program's doc comment and README.md show the same commands to
// build, check and run it; README's run command is the one
// TestProgramRunsItsOwnOperator runs (KAFKA_BROKERS, STATE_DIR and
// ALERTS_FILE set). Bug: the doc comment's run command set no
// ALERTS_FILE, so the alerts sink opened the spec's default,
// /var/lib/tflo/anomaly/alerts.jsonl, in a folder nothing had made (the
// state went to STATE_DIR=/tmp/anomaly), and the program failed at start.
func TestDocCommandsMatchREADME(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	// README's shell block, continuation lines joined, comments dropped.
	block := regexp.MustCompile("(?s)```sh\n(go build -o bin/ ./workers/examples/anomaly\n.*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "README.md no longer shows the anomaly program's commands")
	shown := map[string]bool{}
	for _, l := range strings.Split(strings.ReplaceAll(string(block[1]), "\\\n", ""), "\n") {
		if l, _, _ = strings.Cut(l, "#"); strings.TrimSpace(l) != "" {
			shown[strings.Join(strings.Fields(l), " ")] = true
		}
	}
	var commands int
	for _, l := range strings.Split(string(src), "\n") {
		cmd, ok := strings.CutPrefix(l, "//\t")
		if !ok || !strings.Contains(cmd, "anomaly") {
			continue
		}
		commands++
		cmd = strings.Join(strings.Fields(cmd), " ")
		require.True(t, shown[cmd], "main.go shows %q, which README.md does not", cmd)
	}
	require.Equal(t, 3, commands, "main.go's doc comment shows build, check and run")
}
