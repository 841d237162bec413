package split_test

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkAssign10k":       {"sort-10k-splits": baselineSort},
		"BenchmarkJoinBalance1000": {"store-writes-91-moves": baselineMoves},
	})
}
