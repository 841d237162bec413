package workflows_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/workflows"
)

// A round's one-line story (what the web UI shows) says what the round's
// checkpoints archived, and only when they archived something.
func TestRoundSummarySaysWhatItArchived(t *testing.T) {
	s := workflows.RoundSummary{Round: 3, Workers: 2, Shards: 4, OK: 4, Bytes: 1500, ArchivedRows: 1234, ArchivedBytes: 56_000}
	require.Contains(t, s.String(), "archived 1234 rows (56.0 kB)")
	s.ArchivedRows, s.ArchivedBytes = 0, 0
	require.NotContains(t, s.String(), "archived")
}
